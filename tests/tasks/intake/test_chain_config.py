"""The plugin chain from ``configs/chain.json``: selection, order, scorer override, errors."""

from __future__ import annotations

from typing import Any

import pytest
from builders import H100, model, uniform_worker
from service_builders import cluster_of, small_request, uniform_cluster

from tasks.decision.replay import replay
from tasks.intake.chain_config import ChainConfigError, load_chain, parse_chain
from tasks.testing import Harness


def test_chain_config_selects_and_orders_plugins(tmp_path: Any) -> None:
    loaded = parse_chain(
        {
            "filters": [{"name": "status"}, {"name": "labels", "enabled": False}],
            "strategies": [{"name": "single_worker_single_gpu"}],
            "scorer": "binpack",
        }
    )
    assert [f.name for f in loaded.chain.filters] == ["status"]
    assert [s.name for s in loaded.chain.strategies] == ["single_worker_single_gpu"]
    assert loaded.placement_override == "binpack"
    assert load_chain(tmp_path / "missing.json").spec.name == "gpustack-default"
    for bad, where in [
        ({"filters": [{"name": "nope"}]}, "filters"),
        ({"strategies": [{"name": "single_worker_single_gpu"}] * 2}, "strategies"),
        ({"strategies": [{"name": "single_worker_single_gpu", "enabled": False}]}, "strategies"),
        ({"scorer": "random"}, "scorer"),
    ]:
        with pytest.raises(ChainConfigError, match=where):
            parse_chain(bad)


def test_the_configured_scorer_overrides_the_models_placement_strategy() -> None:
    h = Harness(chain=parse_chain({"scorer": "binpack"}))
    h.apply(uniform_cluster())
    h.submit(small_request("r"))
    h.pump()
    assert h.events(["sched.decision.made"])[0].data["chain"]["scorer"] == "binpack"


QWEN_05B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 896,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "num_hidden_layers": 24,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "torch_dtype": "bfloat16",
}


def _tiny(rid: str, **fields: Any) -> dict[str, Any]:
    row = model(name="tiny", hf_config=QWEN_05B, weight_bytes=988_097_536)
    return {"request_id": rid, "policy": "precise", "model": row, **fields}


def _fractions(h: Harness) -> dict[str, list[str]]:
    return {
        e.request_id or "": e.data["outcome"]["launch"]["backend_parameters"]
        for e in h.events(["sched.decision.made"])
    }


def test_the_chains_precise_block_sets_sharing_for_every_precise_request() -> None:
    """``precise.gpu_sharing`` in chain.json right-sizes the fraction of a 0.5B on an H100 to
    0.02 (the core's worked example: weights + KV floor + headroom over the free memory after
    SGLang's context); a request's own ``gpu_sharing: false`` wins, as the default chain's absent
    block does."""
    sharing = Harness(chain=parse_chain({"precise": {"gpu_sharing": True}}))
    sharing.apply(cluster_of(uniform_worker(1, "h100", 2, H100)))
    sharing.submit(_tiny("shared"))
    sharing.submit(_tiny("own", gpu_sharing=False))
    sharing.pump()
    assert _fractions(sharing) == {
        "shared": ["--mem-fraction-static", "0.02"],
        "own": ["--mem-fraction-static", "0.83"],  # SGLang's default for an H100, whole
    }
    first, second = (e.data for e in sharing.events(["sched.decision.made"]))
    assert first["outcome"]["selected_candidate"]["computed_resource_claim"]["vram"] == {"0": 16_823_521_117}
    # GPU 0 is shared (16.8 GB booked); the unshared one fills the rest of it (best fit: SGLang
    # starts there and takes what is free, 80 GiB − 16.8 GB) and keeps GPU 1 whole
    assert second["outcome"]["selected_candidate"]["computed_resource_claim"]["vram"] == {
        "0": 85_899_345_920 - 16_823_521_117
    }
    recorded = first["chain"]
    assert recorded["precise"]["gpu_sharing"] is True
    assert replay(sharing.rt.client, sharing.rt.cluster).identical == 2

    default = Harness()
    default.apply(cluster_of(uniform_worker(1, "h100", 2, H100)))
    default.submit(_tiny("plain"))
    default.pump()
    assert _fractions(default) == {"plain": ["--mem-fraction-static", "0.83"]}
    assert "precise" not in default.events(["sched.decision.made"])[0].data["chain"]


def test_a_bad_precise_block_names_the_field() -> None:
    for bad, where in [
        ({"precise": {"gpu_sharin": True}}, "precise.gpu_sharin"),
        ({"precise": {"admission_margin": -1}}, "precise.admission_margin"),
        ({"precise": {"kv_floor_cap": 0}}, "precise.kv_floor_cap"),
    ]:
        with pytest.raises(ChainConfigError, match=where):
            parse_chain(bad)
