"""``policy: precise`` judged by SGLang 0.5.16's own code, executed on CPU.

On every placement of the corpus (``support.corpus``) and on the issue's 17 configurations:
the fraction and the KV cell equal SGLang's; a placement SGLang starts with the KV floor met
is scheduled with ``kv_tokens`` within 2 % of SGLang's figure; one SGLang fails to start (or
starts below the floor) is refused; arguments SGLang refuses are ``rejected`` naming
``model.backend_parameters``. SGLang's own CUDA context and NCCL buffers (the free memory it
loses before it measures, ``sglang_context``) were not measured: every decision is checked
with the setting equal to SGLang's context over 0–1 GiB.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from precise_oracle.support import GIB, MIB, MODELS, Case, corpus, frees, require, weight_bytes, workers

require()

import checkpoint  # noqa: E402  (tools/sglang-oracle, importable once require() ran)
import extra  # noqa: E402
import launch  # noqa: E402

from scheduler_core import PolicySettings, PreciseSettings, schedule  # noqa: E402
from scheduler_core.plugins import PRECISE_CHAIN  # noqa: E402
from scheduler_core.precise.kv import kv_shape  # noqa: E402
from scheduler_core.precise.startup import running_dtype  # noqa: E402
from scheduler_core.precise.weights import Placement, anatomy, rank_weights, rates  # noqa: E402

#: SGLang's own context per GPU, GiB: the range the decisions are checked over.
CONTEXTS = (0.0, 0.5, 1.0)
#: ``kv_tokens`` must lie this close to SGLang's ``max_total_num_tokens``.
TOLERANCE = 0.02
CORPUS = corpus()


def _decide(case: Case, context: float):
    settings = PolicySettings.of(PreciseSettings(sglang_context=int(context * GIB)))
    chain = dataclasses.replace(PRECISE_CHAIN, settings=settings)
    request = {"request_id": "r", "policy": "precise", "model": case.row(), "workers": workers(case)}
    return schedule(request, chain=chain)


def _launched_fraction(result) -> float:
    argv = (
        result.launch.nodes[0].backend_parameters if result.launch.nodes else result.launch.backend_parameters
    )
    return float(argv[argv.index("--mem-fraction-static") + 1])


def _floor(case: Case, sglang: launch.Launch) -> int:
    """The default KV floor: the context SGLang derives, at most 8,192 tokens and at most the
    pool the user caps with ``--max-total-tokens``."""
    cap = launch.parse(case.argv)[0].get("max_total_tokens")
    floor = min(sglang.context_len, 8192)
    return floor if cap is None else min(floor, cap)


def _check(case: Case, context: float) -> str | None:
    """Why precise disagrees with SGLang on ``case`` (None: it agrees)."""
    sglang = launch.launch(case.row(), case.argv, frees(case), context, hip=case.rocm)
    result = _decide(case, context)
    if sglang.fatal is not None:
        field = result.error.field if result.error else None
        return (
            None
            if (result.status, field) == ("rejected", "model.backend_parameters")
            else (f"SGLang refuses ({sglang.fatal}); precise: {result.status}")
        )
    floor = _floor(case, sglang)
    starts = sglang.cause is None and sglang.tokens is not None and sglang.tokens >= floor
    if not starts:
        return (
            None
            if result.status == "unschedulable"
            else (
                f"SGLang: {sglang.cause or f'{sglang.tokens} tokens < floor {floor}'}; "
                f"precise: {result.status}"
            )
        )
    if result.status != "scheduled":
        return f"SGLang starts with {sglang.tokens} tokens (floor {floor}); precise: {result.status}"
    chosen = result.candidates[result.selected]
    if not math.isclose(_launched_fraction(result), sglang.launch_fraction, abs_tol=1e-12):
        return f"fraction {_launched_fraction(result)} != SGLang's {sglang.launch_fraction}"
    if abs(chosen.kv_tokens - sglang.tokens) > TOLERANCE * sglang.tokens:
        return f"kv_tokens {chosen.kv_tokens} vs SGLang's {sglang.tokens}"
    return None


@pytest.mark.parametrize("context", CONTEXTS)
def test_every_corpus_decision_is_sglangs(context: float) -> None:
    """700 placements × SGLang's context at 0, 0.5 and 1 GiB: every admission, refusal, rejection,
    fraction and ``kv_tokens`` (within 2 %) as SGLang's own code decides it."""
    wrong = [f"{case}: {why}" for case in CORPUS if (why := _check(case, context)) is not None]
    assert not wrong, f"{len(wrong)} of {len(CORPUS)} differ:\n" + "\n".join(wrong[:20])


def test_the_corpus_covers_what_it_claims() -> None:
    """Every kind of outcome occurs, so the agreement above is not vacuous."""
    kinds = {"fatal": 0, "starts": 0, "fails": 0, "below_floor": 0}
    causes: set[str] = set()
    for case in CORPUS:
        sglang = launch.launch(case.row(), case.argv, frees(case), 0.5, hip=case.rocm)
        if sglang.fatal:
            kinds["fatal"] += 1
        elif sglang.cause:
            kinds["fails"] += 1
            causes.add(sglang.cause)
        elif sglang.tokens is not None and sglang.tokens < _floor(case, sglang):
            kinds["below_floor"] += 1
        else:
            kinds["starts"] += 1
    assert min(kinds.values()) >= 10, kinds
    assert {"load_oom", "no_pool"} <= causes, causes
    assert len({case.name for case in CORPUS}) == len(MODELS)


#: The issue's 17 configurations: (model, GPU total MiB, GPUs, argv).
SEVENTEEN = (
    ("Llama-3.1-8B", 81559, 1, ()),
    ("Llama-3.1-8B", 24564, 1, ()),
    ("Llama-3.1-8B", 46068, 1, ("--kv-cache-dtype", "fp8_e4m3")),
    ("Qwen2.5-7B", 24564, 1, ()),
    ("Qwen2.5-7B", 81920, 1, ("--kv-cache-dtype", "fp8_e5m2")),
    ("Qwen2.5-32B", 46068, 2, ("--tp-size", "2")),
    ("Qwen2.5-32B", 81559, 1, ()),
    ("Qwen2.5-72B", 81559, 4, ("--tp-size", "4")),
    ("Qwen2.5-72B", 143771, 2, ("--tp-size", "2", "--kv-cache-dtype", "fp8_e4m3")),
    ("Mistral-7B-v0.3", 24564, 1, ()),
    ("Mistral-7B-v0.3", 81920, 1, ()),
    ("gemma-2-9b", 46068, 1, ()),
    ("Qwen3-30B-A3B", 81559, 1, ()),
    ("Qwen3-30B-A3B", 46068, 2, ("--tp-size", "2")),
    ("DeepSeek-V3", 143771, 8, ("--tp-size", "8")),
    ("DeepSeek-V3", 81559, 16, ("--tp-size", "16")),
    ("DeepSeek-V3", 143771, 8, ("--tp-size", "8", "--kv-cache-dtype", "fp8_e4m3")),
)


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize(("name", "mib", "count", "argv"), SEVENTEEN)
def test_the_seventeen_configurations(
    name: str, mib: int, count: int, argv: tuple[str, ...], context: float
) -> None:
    """Idle GPUs: each is scheduled, at SGLang's fraction, with ``kv_tokens`` within 2 % of SGLang's."""
    case = Case(name, "gpu", tuple((mib * MIB, 0) for _ in range(count)), argv, 8)
    sglang = launch.launch(case.row(), argv, frees(case), context)
    assert sglang.cause is None and sglang.tokens
    result = _decide(case, context)
    assert result.status == "scheduled", result.state_message
    chosen = result.candidates[result.selected]
    assert _launched_fraction(result) == sglang.fraction
    assert abs(chosen.kv_tokens / sglang.tokens - 1) <= TOLERANCE


def test_the_kv_cell_is_sglangs_for_every_layout_and_dtype() -> None:
    """``_compute_cell_size`` on each stage's layers, every model × attention TP × PP × KV dtype."""
    flags = ("auto", "bf16", "fp8_e4m3", "fp8_e5m2", "mxfp8", "nvfp4", "fp4_mx_block16")
    for name, config in MODELS.items():
        model = extra.model_config(config)
        running = running_dtype(config, None)
        assert running == {"fp16": "float16", "bf16": "bfloat16"}[model.dtype], name
        for flag in flags:
            ours = kv_shape(config, flag, running, tuple(config["architectures"]))
            assert ours is not None
            element = extra.kv_cache_dtype(flag, model.dtype)
            for tp in (1, 2, 4, 8, 16):
                for pp in (1, 2, 3):
                    for start, end in extra.pp_layers(config["num_hidden_layers"], pp):
                        assert ours.cell_bytes(tp, end - start) == extra.cell(
                            model, element, flag, tp, end - start
                        ), (name, flag, tp, pp)


def test_the_weights_each_rank_holds_are_sglangs() -> None:
    """From the checkpoint's size and config, each PP stage's rank holds what SGLang constructs there
    (``checkpoint.loaded``: tensor by tensor, SGLang's PP split, dtype and TP rules) within 0.5 %."""
    for name, config in MODELS.items():
        body = anatomy(config, tuple(config["architectures"]))
        assert body is not None
        for dtype in ("auto", "float32"):
            running = running_dtype(config, dtype)
            for tp, pp in ((1, 1), (2, 1), (8, 1), (16, 1), (1, 2), (4, 2), (2, 4)):
                truth = checkpoint.loaded(config, tp=tp, pp=pp, dtype=dtype)
                ours = rank_weights(
                    body, weight_bytes(name), rates(config, running), Placement(tp, tp, pp, False)
                )
                for stage, (mine, theirs) in enumerate(zip(ours, truth, strict=True)):
                    assert abs(mine / theirs - 1) <= 0.005, (name, dtype, tp, pp, stage, mine, theirs)


def test_deepseek_holds_its_replicated_parts_but_not_its_mtp_layer() -> None:
    """DeepSeek-V3 at tp 16: MLA's down-projections and the routers stay whole on every rank
    and layer 61 (MTP) is not constructed: the rank holds neither checkpoint / 16 nor the
    checkpoint without MTP / 16; speculative decoding (NEXTN) adds the MTP layer back."""
    config = MODELS["DeepSeek-V3"]
    total = weight_bytes("DeepSeek-V3")
    (rank,) = checkpoint.loaded(config, tp=16)
    (drafting,) = checkpoint.loaded(config, tp=16, speculative=True)
    body = anatomy(config, ("DeepseekV3ForCausalLM",))
    assert body is not None
    (ours,) = rank_weights(body, total, rates(config, "bfloat16"), Placement(16, 16, 1, False))
    (ours_drafting,) = rank_weights(body, total, rates(config, "bfloat16"), Placement(16, 16, 1, True))
    assert abs(ours / rank - 1) < 0.002 and abs(ours_drafting / drafting - 1) < 0.002
    assert drafting - rank > 0.5 * GIB  # the MTP layer's share of a rank
    assert rank - total / 16 > 0  # replicated parts outweigh the MTP layer left out


def test_checkpoint_layouts_add_up_to_the_published_sizes() -> None:
    """The tensor listing the weight oracle sums is the real one: the safetensors totals of
    Llama-3.1-8B and Qwen2.5-7B exactly, DeepSeek-V3 within 12 MB of 688,586,727,424 B."""
    assert checkpoint.total_bytes(MODELS["Llama-3.1-8B"]) == 16_060_522_496
    assert checkpoint.total_bytes(MODELS["Qwen2.5-7B"]) == 15_231_233_024
    assert abs(checkpoint.total_bytes(MODELS["DeepSeek-V3"]) - 688_586_727_424) < 12_000_000
