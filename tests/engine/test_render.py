"""The fast result-model constructor is equivalent to pydantic's ``model_construct``."""

from __future__ import annotations

from scheduler_core._render import _construct
from scheduler_core._schemas import CandidateOut, ClaimOut


def test_fast_construct_matches_model_construct():
    """Guard against pydantic internals changing under ``_construct``."""
    claim = ClaimOut.model_construct(vram={"0": 5}, ram=None, vram_utilization=0.5, estimated_vram=9)
    fields = {
        "worker_id": 1,
        "worker_name": "a",
        "worker_ip": None,
        "gpu_type": "cuda",
        "gpu_indexes": [0],
        "computed_resource_claim": claim,
        "overcommit": False,
        "score": 12.5,
        "subordinate_workers": None,
        "kv_tokens": None,  # every field is passed, as the renderer does
    }
    fast = _construct(CandidateOut, **dict(fields))
    slow = CandidateOut.model_construct(**dict(fields))
    assert fast == slow
    assert fast.model_dump_json() == slow.model_dump_json()
    assert fast.model_fields_set == slow.model_fields_set
    assert CandidateOut.model_validate_json(fast.model_dump_json()) == slow


def test_kv_tokens_is_left_out_of_the_json_when_unset():
    """``policy: gpustack`` candidates carry no ``kv_tokens`` key (byte-identical JSON);
    a precise candidate's value is written and read back."""
    claim = ClaimOut.model_construct(vram={"0": 5}, ram=None, vram_utilization=0.5, estimated_vram=9)
    fields = {
        "worker_id": 1, "worker_name": "a", "worker_ip": None, "gpu_type": "cuda", "gpu_indexes": [0],
        "computed_resource_claim": claim, "overcommit": False, "score": 1.0, "subordinate_workers": None,
    }
    assert "kv_tokens" not in _construct(CandidateOut, **fields, kv_tokens=None).model_dump_json()
    precise = _construct(CandidateOut, **fields, kv_tokens=4096)
    assert '"kv_tokens":4096' in precise.model_dump_json()
    assert CandidateOut.model_validate_json(precise.model_dump_json()).kv_tokens == 4096
