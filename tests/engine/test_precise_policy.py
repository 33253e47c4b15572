"""``policy: precise`` decisions: per-candidate fraction, SGLang's pool arithmetic, KV floor, dp, outside
usage, rescheduling, sharing, sliding windows, the TP balance, start-up-fatal arguments, the score,
and the properties (SGLang's arithmetic on every chosen GPU, determinism, gpustack unchanged).

Figures are worked by hand from SGLang 0.5.16's rules (``tests/precise_oracle`` checks the same
rules against SGLang's own code): the pool is ``f × (free − 512 MiB context) − weights``."""

from __future__ import annotations

import json
import math
from pathlib import Path

from builders import (
    GIB,
    H100,
    MI300X,
    MIB,
    RTX_4090,
    RTX_4090_SMALL,
    gpu,
    instance,
    model,
    request,
    uniform_worker,
    worker,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_core import schedule
from scheduler_core.precise.fraction import Device, ModelTraits, RuntimeFlags, sizing
from scheduler_core.precise.windows import windows
from scheduler_core.workers import Gpu

#: SGLang's own context per GPU, the ``sglang_context`` default.
CONTEXT = 512 * MIB

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

QWEN_7B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 3584,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "num_hidden_layers": 28,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "torch_dtype": "bfloat16",
}
QWEN_7B_BYTES = 15_231_233_024
QWEN_05B = {
    **QWEN_7B,
    "hidden_size": 896,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "num_hidden_layers": 24,
}


def _precise(model_row, workers, instances=None, **extra):
    return schedule(request(model_row, workers, instances, policy="precise", **extra))


def _qwen(**overrides):
    return model(name="qwen", hf_config=QWEN_7B, weight_bytes=QWEN_7B_BYTES, **overrides)


def test_best_fit_keeps_the_large_gpu_and_books_the_candidates_own_fraction():
    """A 7B fits a 4090 and an H100. The 4090 (24810 MiB: chunk 2048, bs 24, reserve 4096 MiB)
    gets 0.835 = round((24810 − 4096)/24810, 3) and a booking of ⌈0.835 × 26,015,170,560⌉ =
    21,722,667,418 B, which fills its usable memory more than the H100's 0.830 share fills an H100:
    the 4090 is chosen and the H100 node stays whole."""
    result = _precise(_qwen(), [uniform_worker(1, "h100", 8, H100), uniform_worker(2, "rtx", 2, RTX_4090)])
    chosen = result.candidates[result.selected]
    assert result.policy == "precise"
    assert (chosen.worker_name, chosen.gpu_indexes) == ("rtx", [0])
    assert chosen.computed_resource_claim.vram_utilization == 0.835
    assert chosen.computed_resource_claim.vram == {"0": 21_722_667_418}
    assert result.launch.backend_parameters == ["--mem-fraction-static", "0.835"]
    h100 = next(c for c in result.candidates if c.worker_name == "h100")
    assert h100.computed_resource_claim.vram_utilization == 0.83  # 81920 MiB: reserve 13904 → 0.830


def test_kv_tokens_are_predicted_on_every_candidate():
    """4090: pool = 0.835 × (26,015,170,560 − 512 MiB context) − 15,231,233,024 = 6,043,147,182 B
    (SGLang's ``f × pre − weights``); cell = 4 KV heads × (128 + 128) × 28 layers × 2 B = 57,344 B
    → 105,384 tokens."""
    workers = [worker(2, "rtx", [gpu(0, RTX_4090, memory={"total": RTX_4090, "used": 0})])]
    result = _precise(_qwen(), workers)
    pool = 0.835 * (RTX_4090 - CONTEXT) - QWEN_7B_BYTES
    assert result.candidates[0].kv_tokens == int(pool) // 57_344 == 105_384
    assert "kv_tokens" not in schedule(request(_qwen(), workers)).model_dump_json()  # gpustack


def test_weights_that_leave_no_room_for_the_kv_floor_are_refused_with_the_reason():
    """19.5 GiB of weights on a 4090 (24.23 GiB free, 23.73 GiB after SGLang's context, fraction
    0.835): the pool, 0.835 × 23.73 − 19.5 = 0.31 GiB, is below the 8,192-token floor of
    8,192 × 57,344 B = 0.4375 GiB. The need quoted is the free memory that would hold it:
    0.5 + (19.5 + 0.4375) / 0.835 = 24.38 GiB."""
    row = model(name="big", hf_config=QWEN_7B, weight_bytes=int(19.5 * GIB))
    result = _precise(row, [uniform_worker(2, "rtx", 1, RTX_4090)])
    assert result.status == "unschedulable"
    event = next(e for e in result.events if e.reason == "kv_floor_not_met")
    assert "with a 8,192-token KV floor" in event.message and "fraction 0.835" in event.message
    assert "needs 24.38 GiB per GPU" in event.message and "provides 24.23 GiB free" in event.message


def test_the_pool_is_sglangs_not_the_reserve_counted_twice():
    """16.5 GiB on a 4090: SGLang's pool is 0.835 × 23.73 − 16.5 = 3.31 GiB, 7.6 × the floor, and
    SGLang starts. Issue 12's rule 2 (weights + reserve + floor ≤ f × total: 16.5 + 4 + 0.44 > 20.2)
    refused it, counting the activation reserve inside the pool as well as beside it."""
    row = model(name="big", hf_config=QWEN_7B, weight_bytes=int(16.5 * GIB))
    result = _precise(row, [uniform_worker(2, "rtx", 1, RTX_4090)])
    assert result.status == "scheduled"
    pool = 0.835 * (RTX_4090 - CONTEXT) - int(16.5 * GIB)
    assert result.candidates[0].kv_tokens == int(pool) // 57_344


def test_qwen3_moe_on_one_h100_gets_sglangs_96k_tokens():
    """Qwen3-30B-A3B bf16 (61,064,245,248 B) on one H100 (81,559 MiB): fraction 0.830, pre =
    81,047 MiB, pool = 0.83 × 84,983,971,840 − 61,064,245,248 = 9,472,451,379 B; cell = 4 × 256 ×
    48 × 2 = 98,304 B → 96,358 tokens (issue 19: the old rule refused it with kv_floor_not_met)."""
    config = {
        **QWEN_7B,
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "head_dim": 128,
        "num_hidden_layers": 48,
        "num_experts": 128,
        "moe_intermediate_size": 768,
        "max_position_embeddings": 40960,
    }
    row = model(name="moe", hf_config=config, weight_bytes=61_064_245_248)
    result = _precise(row, [uniform_worker(1, "h100", 1, 81_559 * MIB)])
    assert result.status == "scheduled"
    assert result.candidates[0].kv_tokens == 96_358


def test_data_parallel_replicas_each_hold_a_full_copy():
    """dp 2 of a 14.2 GiB model on two 4090s: each GPU holds a full copy and its pool,
    0.835 × 23.73 − 14.2 = 5.6 GiB, holds the floor. A 20 GiB model does not even load beside
    SGLang's fraction (20 > 0.835 × 23.73 = 19.81: no pool left): refused, although GPUStack
    (dp counted as sharding, Σ 2 × 20.2 ≥ 1.2 × 20 + 2) places it."""
    small = _qwen(backend_parameters=["--dp-size", "2"])
    workers = [uniform_worker(2, "rtx", 2, RTX_4090)]
    assert _precise(small, workers).status == "scheduled"
    big = model(name="big", hf_config=QWEN_7B, weight_bytes=20 * GIB, backend_parameters=["--dp-size", "2"])
    assert schedule(request(big, workers)).status == "scheduled"  # gpustack: dp counted as sharding
    refused = _precise(big, workers)
    assert refused.status == "unschedulable"
    assert any(e.reason == "weights_do_not_fit" for e in refused.events)


def test_memory_used_outside_the_ledger_is_respected():
    """GPU 0 reports 10 GiB used by another process: SGLang would see 24.23 − 10 − 0.5 = 13.73 GiB
    and its pool 0.835 × 13.73 − 14.2 < 0, so only GPU 1 is a candidate (GPUStack, reading the
    ledger only, offers both)."""
    gpus = [gpu(0, RTX_4090, memory={"total": RTX_4090, "used": 10 * GIB}), gpu(1, RTX_4090)]
    workers = [worker(2, "rtx", gpus)]
    assert [c.gpu_indexes for c in _precise(_qwen(), workers).candidates] == [[1]]
    assert len(schedule(request(_qwen(), workers)).candidates) == 2


def test_outside_usage_that_sglang_starts_with_is_not_refused():
    """An H100 with 16 GiB of outside usage: GPUStack's booking ⌈0.83 × 80 GiB⌉ = 66.4 GiB exceeds
    the 64 GiB free, yet SGLang starts there (pool 0.83 × 63.5 − 14.2 GiB ≫ floor): precise places
    it and books what is free (SGLang takes it all without sharing)."""
    workers = [worker(1, "h100", [gpu(0, H100, memory={"total": H100, "used": 16 * GIB})])]
    result = _precise(_qwen(), workers)
    assert result.status == "scheduled"
    assert result.candidates[0].computed_resource_claim.vram == {"0": H100 - 16 * GIB}


def test_rescheduling_does_not_compete_with_its_own_claim():
    """The only GPU is held by instance 7 (the one being replaced): counted, nothing fits;
    named in ``replaces``, its claim is left out and the GPU is offered again."""
    workers = [uniform_worker(2, "rtx", 1, RTX_4090)]
    held = [{**instance(7, 2, {0: 21 * GIB}), "name": "qwen-0"}]
    assert _precise(_qwen(), workers, held).status == "unschedulable"
    assert _precise(_qwen(), workers, held, replaces={"id": 7}).status == "scheduled"



def test_replaces_that_matches_no_instance_is_rejected_naming_it():
    """Issue 17, item 7: an id no row has, or an id and a name of different rows, used to be
    accepted silently (the claim meant to be left out was still counted)."""
    workers = [uniform_worker(2, "rtx", 2, RTX_4090)]
    held = [{**instance(7, 2, {0: 21 * GIB}), "name": "qwen-0"},
            {**instance(8, 2, {1: 2 * GIB}), "name": "qwen-1"}]
    for replaces, named in (({"id": 999}, "id 999"), ({"id": 7, "name": "qwen-1"}, "id 7 and name 'qwen-1'"),
                            ({"name": "qwen-9"}, "name 'qwen-9'")):
        result = _precise(_qwen(), workers, held, replaces=replaces)
        error = result.error
        assert (result.status, error.code, error.field) == ("rejected", "invalid_request", "replaces")
        assert error.message == f"matches no instance ({named})"
    assert _precise(_qwen(), workers, held, replaces={"id": 7, "name": "qwen-0"}).status == "scheduled"
    assert _precise(_qwen(), workers, held, replaces={"name": "qwen-1"}).status == "scheduled"


#: SGLang's activation and graph reserve for an 81,920 MiB GPU at tp 1, without the 10 GiB floor:
#: 512 + 8,192 × 1.5 + 1/8 × 1,024 + 256 × 2 (decode graphs) + 58 × 8 (prefill graphs) MiB.
H100_RESERVE = 13_904 * MIB


def test_sharing_right_sizes_the_fraction_so_small_models_share_a_gpu():
    """0.5B (988,097,536 B) on an idle H100 (81,920 MiB) with sharing: the pool must hold the
    weights, the floor (8,192 × 12,288 B) and a 512 MiB headroom: (988,097,536 + 100,663,296 +
    536,870,912) / (85,899,345,920 − 512 MiB) = 0.0190 → fraction 0.020. It books what the instance
    can take: ⌈512 MiB + 0.020 × (total − 512 MiB)⌉ for its context, weights and pool, plus SGLang's
    13,904 MiB activation and graph reserve = 16,823,521,117 B (15.7 GiB, against 0.83 × 80 GiB
    without sharing). Four share the GPU, each sized on what the others leave; a fifth takes the
    default fraction of what remains, and a sixth finds nothing."""
    row = model(name="tiny", hf_config=QWEN_05B, weight_bytes=988_097_536)

    def h100(used):
        return [worker(1, "h100", [gpu(0, H100, memory={"total": H100, "used": used})])]

    first = _precise(row, h100(0), gpu_sharing=True)
    claim = first.candidates[first.selected].computed_resource_claim
    assert claim.vram_utilization == 0.02
    assert first.launch.backend_parameters == ["--mem-fraction-static", "0.02"]
    booked = claim.vram["0"]
    assert booked == math.ceil(CONTEXT + 0.02 * (H100 - CONTEXT)) + H100_RESERVE == 16_823_521_117
    held, used, fractions = [], 0, []
    while (result := _precise(row, h100(used), held, gpu_sharing=True)).status == "scheduled":
        chosen = result.candidates[result.selected].computed_resource_claim
        fractions.append(chosen.vram_utilization)
        held.append(instance(len(held) + 1, 1, {0: chosen.vram["0"]}))
        used += chosen.vram["0"]
    assert fractions == [0.02, 0.024, 0.032, 0.049, 0.83]
    assert used == H100  # the fifth took what was left
    # without sharing the same GPU holds one, which takes it whole
    alone = _precise(row, h100(0))
    assert alone.candidates[alone.selected].computed_resource_claim.vram == {"0": math.ceil(0.83 * H100)}


def test_sliding_window_finds_sets_fixed_groups_miss():
    """Usable 17, 19, 20, 22 GiB: GPUStack's greedy groups are [17] [19, 20] [22] (19 < 0.9 × 22),
    so (20, 22) is never a pair; the window finds both balanced pairs (19, 20) and (20, 22)."""
    slots = [(Gpu("cuda", i, 24 * GIB), free * GIB) for i, free in enumerate((17, 19, 20, 22))]
    pairs = [tuple(free // GIB for _, free in window) for window in windows(slots, 2, (0, True))]
    assert pairs == [(19, 20), (20, 22)]
    # at tp 1 (pp or dp) SGLang checks no balance: every run is a set
    assert len(list(windows(slots, 2, (0, False)))) == 3


def test_multi_worker_uses_partly_used_nodes_with_the_requested_tp():
    """tp 4 of a 70B-sized model (141 GB) on two workers with 2 free H100s each (the others held):
    GPUStack needs whole nodes; precise places 2 nodes × 2 GPUs (35.3 GB per rank)."""
    row = model(
        name="70b",
        hf_config={
            **QWEN_7B,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "num_hidden_layers": 80,
            "hidden_size": 8192,
        },
        weight_bytes=141_107_412_992,
        backend_parameters=["--tp-size", "4"],
    )
    workers = [uniform_worker(1, "a", 4, H100), uniform_worker(2, "b", 4, H100)]
    held = [instance(1, 1, {0: H100, 1: H100}, model_id=5), instance(2, 2, {0: H100, 1: H100}, model_id=5)]
    assert schedule(request(row, workers, held)).status == "unschedulable"
    result = _precise(row, workers, held)
    chosen = result.candidates[result.selected]
    assert chosen.gpu_indexes == [2, 3]
    assert [s.gpu_indexes for s in chosen.subordinate_workers] == [[2, 3]]
    assert result.launch.nodes is not None and len(result.launch.nodes) == 2


def test_multi_worker_books_each_node_by_its_own_gpus():
    """tp 2 over two one-GPU workers of different sizes: w1 a 24,810 MiB 4090, w2 a 24,564 MiB one.
    The fraction comes from the smaller (24,564 MiB, tp 2: reserve 512 + 2048 × 1.5 + 2/8 × 1024
    + 2 × 24 + 42 × 8 = 4,224 MiB → round(20,340 / 24,564, 3) = 0.828); each node books ⌈0.828 × its
    own total⌉, although the set is ordered by usable memory (w2 first) and the leader is w1."""
    row = _qwen(backend_parameters=["--tp-size", "2"])
    workers = [uniform_worker(1, "w1", 1, RTX_4090), uniform_worker(2, "w2", 1, RTX_4090_SMALL)]
    result = _precise(row, workers)
    chosen = result.candidates[result.selected]
    assert (chosen.worker_name, chosen.computed_resource_claim.vram_utilization) == ("w1", 0.828)
    assert chosen.computed_resource_claim.vram == {"0": math.ceil(0.828 * RTX_4090)}
    (follower,) = chosen.subordinate_workers
    assert follower.worker_name == "w2"
    assert follower.computed_resource_claim.vram == {"0": math.ceil(0.828 * RTX_4090_SMALL)}


def test_gpustack_ignores_the_precise_fields():
    """The precise request fields change nothing under ``policy: gpustack`` (byte-identical JSON)."""
    workers = [uniform_worker(1, "h100", 2, H100)]
    plain = schedule(request(_qwen(), workers)).model_dump_json()
    extra = schedule(
        request(
            _qwen(), workers, min_context_tokens=4096, min_kv_tokens=10, gpu_sharing=True, replaces={"id": 3}
        )
    ).model_dump_json()
    assert plain == extra


def test_bad_precise_fields_are_rejected_naming_the_field():
    """Validation: a non-positive floor and an empty instance reference name their field."""
    workers = [uniform_worker(1, "h100", 1, H100)]
    bad = _precise(_qwen(), workers, min_context_tokens=0)
    assert bad.status == "rejected" and bad.error.field == "min_context_tokens"
    empty = _precise(_qwen(), workers, replaces={})
    assert empty.status == "rejected" and empty.error.field == "replaces"


def test_min_kv_tokens_refuses_too_small_caches():
    """The 4090 predicts 105,384 tokens (see above); asking for 110,000 refuses it, 100,000 does not."""
    workers = [worker(2, "rtx", [gpu(0, RTX_4090, memory={"total": RTX_4090, "used": 0})])]
    assert _precise(_qwen(), workers, min_kv_tokens=100_000).status == "scheduled"
    refused = _precise(_qwen(), workers, min_kv_tokens=110_000)
    assert any(e.reason == "kv_tokens_below_minimum" for e in refused.events)


# --------------------------------------------------------------------------- properties

_TOTALS = (RTX_4090, H100, 48_305_799_168)


@st.composite
def _clusters(draw):
    workers = []
    for worker_id in range(1, draw(st.integers(1, 4)) + 1):
        total = draw(st.sampled_from(_TOTALS))
        gpus = [
            gpu(i, total, memory={"total": total, "used": draw(st.sampled_from((0, 0, 3 * GIB, 12 * GIB)))})
            for i in range(draw(st.sampled_from((1, 2, 4))))
        ]
        workers.append(worker(worker_id, f"w{worker_id}", gpus))
    held = []
    for number, w in enumerate(workers):
        if draw(st.booleans()):
            held.append(instance(number + 1, w["id"], {0: draw(st.integers(1, 20)) * GIB}))
    return workers, held


def _check_sglang_arithmetic(row, result, workers, held, sharing):
    """SGLang's start-up on every chosen GPU, recomputed from the request (Qwen-7B layout: 4 KV
    heads of 128 (+128 for V), 28 layers split over pp, bf16; each rank holds weights / (tp·pp)
    within 0.1 %: the norms stay whole, the vocabulary is padded)."""
    chosen = result.candidates[result.selected]
    params = (
        result.launch.nodes[0].backend_parameters if result.launch.nodes else result.launch.backend_parameters
    )
    tp = int(params[params.index("--tp-size") + 1]) if "--tp-size" in params else 1
    pp = int(params[params.index("--pp-size") + 1]) if "--pp-size" in params else 1
    claims = {}
    for h in held:
        for index, amount in h["computed_resource_claim"]["vram"].items():
            claims[(h["worker_id"], int(index))] = claims.get((h["worker_id"], int(index)), 0) + amount
    by_id = {w["id"]: w for w in workers}
    nodes = [(chosen.worker_id, chosen.gpu_indexes, chosen.computed_resource_claim)]
    nodes += [
        (s.worker_id, s.gpu_indexes, s.computed_resource_claim) for s in chosen.subordinate_workers or ()
    ]
    frees, booked, totals = [], [], []
    for worker_id, indexes, claim in nodes:
        devices = {d["index"]: d for d in by_id[worker_id]["status"]["gpu_devices"]}
        for index in indexes:
            total, used = devices[index]["memory"]["total"], devices[index]["memory"]["used"]
            frees.append(min(total - claims.get((worker_id, index), 0), total - used))
            booked.append(claim.vram[str(index)])
            totals.append(total)
    fraction = chosen.computed_resource_claim.vram_utilization
    pre = min(frees) - CONTEXT
    weights = row["weight_bytes"] / (tp * pp)
    cell = max(1, 4 // tp) * 256 * -(-28 // pp) * 2
    pool = fraction * pre - weights
    assert pool >= 8192 * cell - 0.001 * weights  # the pool holds the KV floor
    assert abs(chosen.kv_tokens - pool // cell) <= 0.001 * weights / cell + 1
    if tp > 1:  # SGLang's TP balance on what it measures
        assert min(frees) - CONTEXT >= 0.9 * (max(frees) - CONTEXT)
    for amount, free, total in zip(booked, frees, totals, strict=True):
        assert amount <= free  # the booking fits what is free
        if not sharing:
            assert amount == min(math.ceil(fraction * total), free)
    default = sizing(
        Device(min(totals) / MIB, "cuda"), ModelTraits(False, False, None, 32768), RuntimeFlags(), tp, pp
    )
    assert fraction <= default.launch


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _clusters(),
    st.sampled_from([0.99, 6.4, 15.2, 17.2, 29.5, 65.0]),
    st.booleans(),
    st.sampled_from([[], ["--tp-size", "2"]]),
)
def test_every_precise_placement_follows_sglangs_arithmetic_and_is_deterministic(
    cluster, gib, sharing, params
):
    """Random clusters (partly used GPUs, held claims) and Qwen-7B-shaped models of several sizes."""
    workers, held = cluster
    row = model(name="m", hf_config=QWEN_7B, weight_bytes=int(gib * 1e9), backend_parameters=params)
    first = _precise(row, workers, held, gpu_sharing=sharing)
    again = _precise(json.loads(json.dumps(row)), json.loads(json.dumps(workers)), held, gpu_sharing=sharing)
    assert first.model_dump_json() == again.model_dump_json()
    if first.status == "scheduled":
        _check_sglang_arithmetic(row, first, workers, held, sharing)
    # the same request under gpustack does not depend on the precise fields
    assert (
        schedule(request(row, workers, held)).model_dump_json()
        == schedule(request(row, workers, held, gpu_sharing=sharing, min_kv_tokens=5)).model_dump_json()
    )


def _rocm_workers(count: int, gpus: int) -> list[dict]:
    return [
        worker(w, f"mi{w}", [gpu(i, MI300X, type_="rocm", vendor="amd") for i in range(gpus)])
        for w in range(1, count + 1)
    ]


def test_the_aiter_factor_follows_the_attention_backend_sglang_picks():
    """SGLang multiplies the fraction by 0.85 (context > 8,192) only when the attention backend is
    aiter (``srt/server_args.py``): the user's ``--attention-backend`` decides; on ROCm an MHA/GQA
    model gets aiter, an MLA model only with 16 or 128 KV heads per rank (``max(1, 128 // tp)``
    for DeepSeek's 128 heads: tp 1 or 8 → aiter, tp 4 or 16 → triton)."""
    rocm = Device(196_592, "rocm")
    mla = ModelTraits(mla=True, multimodal=False, vision_config=None, context_len=163_840, kv_heads=128)
    factors = {tp: sizing(rocm, mla, RuntimeFlags(), tp, 1).factor for tp in (1, 4, 8, 16)}
    assert factors == {1: 0.85, 4: 1.0, 8: 0.85, 16: 1.0}
    gqa = ModelTraits(mla=False, multimodal=False, vision_config=None, context_len=32_768, kv_heads=4)
    assert sizing(rocm, gqa, RuntimeFlags(), 1, 1).factor == 0.85
    assert sizing(rocm, gqa, RuntimeFlags(attention_backend="triton"), 1, 1).factor == 1.0
    assert sizing(Device(81_559, "cuda"), gqa, RuntimeFlags(attention_backend="aiter"), 1, 1).factor == 0.85
    short = ModelTraits(mla=False, multimodal=False, vision_config=None, context_len=8_192, kv_heads=4)
    assert sizing(rocm, short, RuntimeFlags(), 1, 1).factor == 1.0  # only past 8,192 tokens


def test_an_explicit_attention_backend_books_what_sglang_will_take_on_rocm():
    """Qwen2.5-7B on one MI300X launches at 0.867: with aiter (ROCm's default) the pool is
    0.867 × 0.85 of the GPU, with ``--attention-backend triton`` the whole 0.867 (it booked
    the aiter share before, 24.8 GiB less than SGLang takes)."""
    booked = {}
    for params in ([], ["--attention-backend", "triton"]):
        result = _precise(_qwen(backend_parameters=params), _rocm_workers(1, 1))
        assert result.launch is not None and result.launch.backend_parameters[-2:] == [
            "--mem-fraction-static",
            "0.867",
        ]
        booked[len(params)] = result.candidates[result.selected].computed_resource_claim.vram["0"]
    assert booked == {0: math.ceil(0.867 * 0.85 * MI300X), 2: math.ceil(0.867 * MI300X)}
    assert booked == {0: 151_916_091_173, 2: 178_724_813_145}


def test_deepseek_over_two_rocm_nodes_at_tp16_runs_triton_and_books_the_whole_fraction():
    """DeepSeek (MLA, 128 KV heads) at tp 16 has 8 heads per rank: SGLang picks triton, no
    aiter factor, so each GPU books ⌈0.857 × total⌉; at tp 8 on one node (16 heads per rank)
    it is aiter again: ⌈0.862 × 0.85 × total⌉."""
    example = json.loads((EXAMPLES / "03-deepseek-two-nodes.json").read_text())["model"]
    booked = {}
    for tp, nodes in ((16, 2), (8, 1)):
        row = model(
            name="ds",
            hf_config=example["hf_config"],
            weight_bytes=example["weight_bytes"],
            backend_parameters=["--tp-size", str(tp)],
            distributed_inference_across_workers=True,
        )
        result = _precise(row, _rocm_workers(nodes, 8))
        chosen = result.candidates[result.selected]
        booked[tp] = set(chosen.computed_resource_claim.vram.values())
    assert booked == {16: {math.ceil(0.857 * MI300X)}, 8: {math.ceil(0.862 * 0.85 * MI300X)}}


def test_gpu_sharing_must_be_a_boolean():
    for value in ("yes", "true", 1):
        result = _precise(_qwen(), [uniform_worker(1, "h100", 1, H100)], gpu_sharing=value)
        assert result.status == "rejected" and result.error is not None
        assert result.error.field == "gpu_sharing"
