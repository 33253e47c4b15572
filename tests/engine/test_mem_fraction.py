"""MemFractionStaticCalculator: tiers, reserve terms, VLM adjustment, selection effects.

Golden values are the ones GPUStack's own tests assert
(``tests/policies/candidate_selectors/sglang/test_sglang_resource_fit_selector.py``), re-derived from
``sglang_resource_fit_selector.py: MemFractionStaticCalculator._cal_mem_fraction_static``
(claim = int(total × fraction)); the branch cases are hand computed from the
formula (reserve in MiB, fraction rounded to 3 decimals).
"""

from __future__ import annotations

import pytest
from builders import ASCEND_910B, H100, H200, MIB, RTX_4080, RTX_4090, RTX_4090_SMALL, view

from scheduler_core.cluster import ClusterState
from scheduler_core.mem_fraction import (
    FractionFlags,
    ManualSelection,
    MemFractionCalculator,
    port_fraction,
    vlm_adjusted,
)
from scheduler_core.params import BackendParameters

QWEN2_VL_VISION = {"depth": 32, "embed_dim": 1280, "hidden_size": 3584, "num_heads": 16}
QWEN35_VISION = {"depth": 27, "hidden_size": 1152, "num_heads": 16}


def flags(*params: str) -> FractionFlags:
    return FractionFlags.from_parameters(BackendParameters(list(params)))


def mib(total: int) -> float:
    return total / MIB


def fraction(
    total: int, *params: str, npu: bool = False, max_tp: int = 1, max_pp: int = 1, vision=None
) -> float:
    return port_fraction(
        flags(*params), mib(total), is_npu=npu, max_tp=max_tp, max_pp=max_pp, vision_config=vision
    )


@pytest.mark.parametrize(
    ("case", "total", "kwargs", "expected", "claim"),
    [
        ("4080 auto tp1", RTX_4080, {}, 0.772, 13_256_383_004),
        ("4080 two GPUs (pp or manual 2)", RTX_4080, {"max_pp": 2}, 0.765, 13_136_182_640),
        ("H200 auto", H200, {}, 0.907, 137_420_587_581),
        ("H100 mixed with a 24564 MiB 4090", RTX_4090_SMALL, {}, 0.847, None),
    ],
)
def test_golden_fractions_match_gpustack_tests(case, total, kwargs, expected, claim):
    """Rule: port formula; values asserted by GPUStack's selector tests."""
    value = fraction(total, **kwargs)
    assert value == expected, case
    if claim is not None:
        assert int(total * value) == claim


def test_h100_claim_in_mixed_cluster_uses_the_4090_bucket():
    """Rule: one fraction per GPU type from the smallest GPU of the type (DeepSeek-R1 test)."""
    assert int(H100 * fraction(RTX_4090_SMALL)) == 72_756_745_994


def test_vlm_qwen2_vl_on_4080_tp4_clamps_adjustment_at_080():
    """Rule: VLM adjustment; depth 32 × hidden 3584 is far above ViT-L, clamp 0.8 → 0.569."""
    value = fraction(RTX_4080, max_tp=4, vision=QWEN2_VL_VISION)
    assert value == 0.569
    assert int(RTX_4080 * value) == 9_770_572_447


def test_vlm_qwen2_vl_on_ascend_910b():
    """Rule: NPU tiers skip 64 GiB exactly (< is strict) → H100 tier, then VLM → 0.604."""
    value = fraction(ASCEND_910B, npu=True, vision=QWEN2_VL_VISION)
    assert value == 0.604
    assert int(ASCEND_910B * value) == 41_506_563_948


def test_vlm_qwen35_on_910b_with_user_chunked_prefill():
    """Rule: user --chunked-prefill-size replaces the tier default; 10 GiB floor; VLM ratio 1.42."""
    value = fraction(ASCEND_910B, "--chunked-prefill-size", "4096", npu=True, max_tp=8, vision=QWEN35_VISION)
    assert value == 0.768
    assert int(ASCEND_910B * value) == 52_776_558_133


@pytest.mark.parametrize(
    ("total", "max_tp", "expected"),
    [(H100, 1, 0.836), (H100, 8, 0.819), (RTX_4090, 1, 0.848), (RTX_4090, 4, 0.828)],
)
def test_hand_computed_values_h100_and_4090(total, max_tp, expected):
    """Rule: tier by memory, graph batch by tp (<4 vs >=4), tp·pp/8 GiB term."""
    assert fraction(total, max_tp=max_tp) == expected


def test_tier_boundaries_and_top_tier():
    """Rule: tiers are strict upper bounds; above 160 GiB chunk 16384 / bs 512."""
    # 200 GiB GPU: reserve 512 + 16384*1.5 + 1024 + 128 = 26240 → (204800-26240)/204800
    assert fraction(200 * 1024 * MIB) == round((204800 - 26240) / 204800, 3)
    # exactly 20 GiB is not "< 20 GiB": 35 GiB tier (2048 / 24)
    assert fraction(20 * 1024 * MIB) == round((20480 - (512 + 3072 + 48 + 128)) / 20480, 3)


def test_unknown_memory_falls_back_to_088():
    """Rule: gpu_mem 0 → fraction 0.88 (SGLang fallback)."""
    assert fraction(0) == 0.88


@pytest.mark.parametrize(
    ("params", "extra_mib"),
    [
        (("--speculative-algorithm", "STANDALONE"), 6 * 1024),
        (("--speculative-algorithm", "EAGLE"), 2 * 1024),
        (("--speculative-algorithm", "NGRAM"), 0),
        (("--speculative-algorithm", "eagle"), 2 * 1024),  # case-sensitive: not NGRAM → +2 GiB
        (("--enable-piecewise-cuda-graph", "true", "--piecewise-cuda-graph-max-tokens", "4096"), 1024),
        (("--enable-piecewise-cuda-graph",), 0),  # bare flag has no value → ignored upstream
    ],
)
def test_reserve_terms_after_the_floor(params, extra_mib):
    """Rule: speculative and piecewise terms are added after the 10 GiB floor (H100: 13440 MiB base)."""
    base = 13440
    assert fraction(H100, *params) == round((81920 - (base + extra_mib)) / 81920, 3)


def test_dp_attention_terms():
    """Rule: dp-attention adds bs·dp·3 MiB, plus bs·dp·1.5 when bs > 300."""
    # H100 tp8: bs 512; 512+12288+1024+1024 = 14848; + 512*2*3 + 512*2*1.5 = 4608
    value = fraction(H100, "--enable-dp-attention", "--dp-size", "2", max_tp=8)
    assert value == round((81920 - (14848 + 4608)) / 81920, 3)
    # 4080: bs 8 (<= 300): only bs·dp·3 = 48
    value = fraction(RTX_4080, "--enable-dp-attention", "--dp-size", "2")
    assert value == round((16376 - (3728 + 48)) / 16376, 3)


def test_user_graph_batch_and_zero_chunk():
    """Rule: user --cuda-graph-max-bs replaces the tier value; chunk 0 adds no activation reserve."""
    value = fraction(RTX_4080, "--cuda-graph-max-bs", "64", "--chunked-prefill-size", "0")
    assert value == round((16376 - (512 + 128 + 128)) / 16376, 3)


@pytest.mark.parametrize(
    ("total_mib", "max_tp", "reserve"),
    [
        (30 * 1024, 1, 512 + 32768 * 1.5 + 32 + 128),  # Atlas A2B4 row, bs 16
        (30 * 1024, 4, 512 + 32768 * 1.5 + 128 + 512),  # bs 64 at tp >= 4
        (62 * 1024, 1, 512 + 32768 * 1.5 + 128 + 128),  # Atlas A2/A3 row, bs 64, above the floor
    ],
)
def test_npu_tiers(total_mib, max_tp, reserve):
    """Rule: the NPU rows of the port (037c3982) sit inside the tier chain."""
    value = port_fraction(flags(), total_mib, is_npu=True, max_tp=max_tp, max_pp=1, vision_config=None)
    assert value == round((total_mib - max(reserve, 10240 if total_mib > 60 * 1024 else 0)) / total_mib, 3)


def test_vlm_defaults_when_vision_config_is_empty():
    """Rule: missing layer count → 24, missing hidden → 1024: ratio 1, factor 0.95."""
    assert vlm_adjusted(0.8, {}) == round(0.8 * 0.95, 3)
    # num_hidden_layers wins over depth; tiny ViT clamps at 1.05
    assert vlm_adjusted(0.8, {"num_hidden_layers": 1, "depth": 99, "hidden_size": 64}) == round(
        0.8 * 0.95 * 1.05, 3
    )


def _worker(worker_id: int, name: str, totals: list[int], type_: str = "cuda", vendor: str = "nvidia"):
    return view(worker_id, totals, name=name, type_=type_, vendor=vendor)


def test_calculator_manual_selection_sets_tp_and_pp_and_min_gpu():
    """Rule: manual selection: select_tp = most GPUs on one worker, max_pp = selected workers,
    and only the selected GPUs count for the minimum (4090 + 3 of 4 GPUs of a 4080 box → 0.733)."""
    workers = [_worker(1, "host4090", [RTX_4090]), _worker(2, "host4080", [RTX_4080] * 4)]
    selection = ManualSelection(
        by_type={"cuda": {"host4090": [0], "host4080": [0, 1, 2]}}, gpus_per_replica=None, active=True
    )
    calc = MemFractionCalculator(flags(), selection, "cuda", ClusterState(workers, []), None)
    assert (calc.max_tp(), calc.max_pp()) == (3, 2)
    value = calc.fraction(calc.inputs(workers))
    assert value == 0.733
    assert int(RTX_4080 * value) == 12_586_695_262
    assert int(RTX_4090 * value) == 19_069_120_020


def test_calculator_gpus_per_replica_raises_max_tp():
    """Rule: gpus_per_replica joins max(tp, select_tp, gpus_per_replica)."""
    workers = [_worker(1, "a", [RTX_4090] * 4)]
    selection = ManualSelection(by_type={"cuda": {"a": [0, 1, 2, 3]}}, gpus_per_replica=4, active=True)
    calc = MemFractionCalculator(flags(), selection, "cuda", ClusterState(workers, []), None)
    assert calc.max_tp() == 4
    assert calc.fraction(calc.inputs(workers)) == 0.828  # as 4090 at tp 4: bs 80, tp·pp/8 GiB = 512 MiB


def test_calculator_detects_npu_by_vendor_or_type():
    """Rule: NPU when type is cann or any GPU is vendor ascend / type cann."""
    none = ManualSelection(by_type={}, gpus_per_replica=None, active=False)
    by_vendor = [_worker(1, "a", [ASCEND_910B], type_="npu", vendor="Ascend")]
    calc = MemFractionCalculator(flags(), none, "npu", ClusterState(by_vendor, []), None)
    assert calc.is_npu(by_vendor)
    assert not MemFractionCalculator(flags(), none, "cuda", ClusterState([], []), None).is_npu(
        [_worker(2, "b", [H100])]
    )
    assert MemFractionCalculator(flags(), none, "cann", ClusterState([], []), None).is_npu([])
