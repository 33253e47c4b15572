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
    }
    fast = _construct(CandidateOut, **dict(fields))
    slow = CandidateOut.model_construct(**dict(fields))
    assert fast == slow
    assert fast.model_dump_json() == slow.model_dump_json()
    assert fast.model_fields_set == slow.model_fields_set
    assert CandidateOut.model_validate_json(fast.model_dump_json()) == slow
