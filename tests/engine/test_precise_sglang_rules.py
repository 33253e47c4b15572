"""``policy: precise`` follows SGLang 0.5.16's start-up rules (issue 19), worked by hand:
start-up-fatal arguments, the TP memory balance, the float32 dtype rule, the VLM factor as
SGLang reads it, the best-fit score, the ``--max-total-tokens`` cap and the admission margin.

``tests/precise_oracle`` checks the same decisions against SGLang's own code over a corpus."""

from __future__ import annotations

import dataclasses

import pytest
from builders import GIB, H100, H200, MIB, RTX_4090, gpu, instance, model, request, uniform_worker, worker

from scheduler_core import PolicySettings, PreciseSettings, schedule
from scheduler_core.plugins import PRECISE_CHAIN

QWEN_7B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "num_hidden_layers": 28,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "torch_dtype": "bfloat16",
}
QWEN_7B_BYTES = 15_231_233_024
#: One H100 as nvidia-smi reports it (81,559 MiB), the issue's GPU.
H100_SMI = 81_559 * MIB


def _precise(row, workers, chain=None, **extra):
    return schedule(request(row, workers, policy="precise", **extra), chain=chain)


def _qwen(**overrides):
    return model(name="qwen", hf_config=QWEN_7B, weight_bytes=QWEN_7B_BYTES, **overrides)


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--kv-cache-dtype", "fp16"], "SGLang refuses --kv-cache-dtype fp16: invalid choice: 'fp16'"),
        (
            ["--kv-cache-dtype", "float16"],
            "SGLang refuses --kv-cache-dtype float16: invalid choice: 'float16'",
        ),
        (["--kv-cache-dtype=fp4_e2m1"], "Use --kv-cache-dtype=fp4_mx_block16."),
        (["--context-length", "40000"], "greater than the model's derived context length (32768)"),
        (["--dtype", "fp8"], "Unknown dtype: fp8"),
    ],
)
def test_arguments_sglang_refuses_are_rejected_under_precise_only(argv, reason):
    """argparse's ``--kv-cache-dtype`` choices lack fp16/float16; ``configure_kv_cache_dtype`` raises
    for fp4_e2m1; ``_derive_context_length`` for a context above the model's; ``_get_and_verify_dtype``
    for an unknown dtype. GPUStack's behaviour (it places them) stays as it is."""
    workers = [uniform_worker(1, "h100", 1, H100)]
    result = _precise(_qwen(backend_parameters=argv), workers)
    assert result.status == "rejected" and result.error is not None
    assert (result.error.field, result.error.code) == (
        "model.backend_parameters",
        "invalid_backend_parameters",
    )
    assert reason in result.error.message
    assert schedule(request(_qwen(backend_parameters=argv), workers)).status == "scheduled"


@pytest.mark.parametrize(("value", "status"), [("1", "scheduled"), ("true", "scheduled"), ("0", "rejected")])
def test_a_longer_context_needs_sglangs_environment_switch(value, status):
    """``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN`` in the model's env (SGLang's ``EnvBool``:
    1/true/yes/y) lets SGLang start with a context above the model's."""
    row = _qwen(
        backend_parameters=["--context-length", "40000"],
        env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": value},
    )
    assert _precise(row, [uniform_worker(1, "h100", 1, H100)]).status == status


def _two_h100(used: int) -> list[dict]:
    return [worker(1, "h100", [gpu(0, H100, memory={"total": H100, "used": used}), gpu(1, H100)])]


def test_tp_ranks_sglang_finds_unbalanced_are_never_chosen():
    """Two H100s, one with 10 GiB used by another process: after SGLang's 0.5 GiB context the
    ranks see 69.5 and 79.5 GiB, and 69.5 < 0.9 × 79.5 = 71.55 GiB makes SGLang refuse to start
    at tp 2 (``_check_tp_memory_balance``, on by default). precise finds no balanced set; with
    the check off in the model's env it places them; dp 2 (tp 1) is never checked."""
    tp2 = _qwen(backend_parameters=["--tp-size", "2"])
    refused = _precise(tp2, _two_h100(10 * GIB))
    assert refused.status == "unschedulable"
    assert any(e.reason == "no_balanced_gpu_set" for e in refused.events)
    off = _qwen(backend_parameters=["--tp-size", "2"], env={"SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK": "0"})
    assert _precise(off, _two_h100(10 * GIB)).status == "scheduled"
    assert _precise(_qwen(backend_parameters=["--dp-size", "2"]), _two_h100(10 * GIB)).status == "scheduled"
    # 7 GiB used: 72.5 ≥ 71.55 GiB, balanced
    assert _precise(tp2, _two_h100(7 * GIB)).status == "scheduled"


def test_a_float32_checkpoint_runs_as_float16():
    """A Qwen2.5-7B-shaped float32 checkpoint (2 × 15,231,233,024 B) on one H100 (81,559 MiB):
    ``dtype auto`` runs it as float16, halving the weights in memory and the KV element. pool =
    0.83 × (81,559 − 512) MiB − 15,231,233,024 = 55,305,463,603 B; cell = 4 × 256 × 28 × 2 =
    57,344 B → 964,450 tokens (issue 19: 336 k when sized as float32)."""
    row = model(name="f32", hf_config={**QWEN_7B, "torch_dtype": "float32"}, weight_bytes=2 * QWEN_7B_BYTES)
    result = _precise(row, [uniform_worker(1, "h100", 1, H100_SMI)])
    assert result.candidates[0].kv_tokens == 964_450
    # --dtype float32 keeps it float32: twice the weights, a 4-byte element
    kept = _precise(
        model(name="f32", hf_config={**QWEN_7B, "torch_dtype": "float32"}, weight_bytes=2 * QWEN_7B_BYTES,
              backend_parameters=["--dtype", "float32"]),
        [uniform_worker(1, "h100", 1, H100_SMI)],
    )  # fmt: skip
    pool = 0.83 * (H100_SMI - 512 * MIB) - 2 * QWEN_7B_BYTES
    assert kept.candidates[0].kv_tokens == int(pool) // (57_344 * 2)


def test_gemma_float32_runs_as_bfloat16():
    """SGLang downcasts a float32 Gemma to bfloat16, not float16: the same bytes, both halve."""
    gemma = {
        **QWEN_7B,
        "architectures": ["Gemma2ForCausalLM"],
        "model_type": "gemma2",
        "torch_dtype": "float32",
    }
    qwen = {**QWEN_7B, "torch_dtype": "float32"}
    tokens = [
        _precise(
            model(name="m", hf_config=config, weight_bytes=2 * QWEN_7B_BYTES),
            [uniform_worker(1, "h", 1, H100_SMI)],
        )
        .candidates[0]
        .kv_tokens
        for config in (gemma, qwen)
    ]
    assert tokens[0] == tokens[1] == 964_450


def test_the_vlm_factor_reads_what_sglang_reads():
    """Qwen2.5-VL's vision config names its depth ``depth``; SGLang's ``adjust_mem_fraction_for_vlm``
    reads ``num_hidden_layers`` (default 24) and ``hidden_size``: ratio 24 × 1280² / (24 × 1024²) =
    1.5625, factor 0.95 × (1 − 0.1 × 0.5625) = 0.8965625. On an H100 the multimodal model runs no
    prefill graph (reserve 13,440 MiB → 0.835): 0.835 × 0.8965625. Had SGLang read the 32 layers
    (``num_hidden_layers: 32``), the factor would be 0.95 × (1 − 0.1 × 1.0833) = 0.8470833."""
    vl = {**QWEN_7B, "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
          "vision_config": {"depth": 32, "hidden_size": 1280, "num_heads": 16}}  # fmt: skip
    workers = [uniform_worker(1, "h100", 1, H100_SMI)]
    launched = _precise(model(name="vl", hf_config=vl, weight_bytes=16_584_333_312), workers).launch
    assert float(launched.backend_parameters[1]) == pytest.approx(0.835 * 0.8965625, abs=1e-12)
    named = {**vl, "vision_config": {"num_hidden_layers": 32, "hidden_size": 1280}}
    launched = _precise(model(name="vl", hf_config=named, weight_bytes=16_584_333_312), workers).launch
    assert float(launched.backend_parameters[1]) == pytest.approx(
        0.835 * 0.95 * (1 - 0.1 * (32 / 24 * 1.5625 - 1))
    )
    # --language-only skips the factor; the multimodal rule still turns the prefill graph off (0.835)
    only = model(name="vl", hf_config=vl, weight_bytes=16_584_333_312, backend_parameters=["--language-only"])
    assert _precise(only, workers).launch.backend_parameters[-2:] == ["--mem-fraction-static", "0.835"]


def test_the_score_sends_a_small_model_to_the_small_gpu():
    """A 0.5B on an idle 8 × H200 node and an idle 2 × 4090 node (both broken by one GPU): best fit
    fills the GPU whose free memory its need (context, weights, floor at the fraction) fills most,
    the 4090. Booked memory would have picked the H200: 0.893 of its total against 0.835."""
    tiny = {**QWEN_7B, "hidden_size": 896, "intermediate_size": 4864, "num_attention_heads": 14,
            "num_key_value_heads": 2, "num_hidden_layers": 24}  # fmt: skip
    row = model(name="tiny", hf_config=tiny, weight_bytes=988_097_536)
    result = _precise(row, [uniform_worker(1, "h200", 8, H200), uniform_worker(2, "rtx", 2, RTX_4090)])
    chosen = result.candidates[result.selected]
    assert chosen.worker_name == "rtx"
    h200 = next(c for c in result.candidates if c.worker_name == "h200")
    assert h200.computed_resource_claim.vram_utilization > chosen.computed_resource_claim.vram_utilization


def test_max_total_tokens_caps_the_prediction_and_the_default_floor():
    """``--max-total-tokens 1000``: SGLang's pool holds 1,000 tokens (``_apply_token_constraints``),
    and the default floor (the context capped at 8,192) is capped at it too."""
    result = _precise(
        _qwen(backend_parameters=["--max-total-tokens", "1000"]), [uniform_worker(1, "h", 1, H100)]
    )
    assert result.status == "scheduled" and result.candidates[0].kv_tokens == 1000


def test_the_admission_margin_refuses_but_never_changes_the_prediction():
    """A 4 GiB ``admission_margin``: 16.5 GiB on a 4090 leaves a 3.31 GiB pool, below floor +
    margin (refused); 14 GiB leaves 5.81 GiB (admitted) with the same ``kv_tokens`` as without it."""
    settings = PolicySettings.of(PreciseSettings(admission_margin=4 * GIB))
    margin = dataclasses.replace(PRECISE_CHAIN, settings=settings)
    rtx = [uniform_worker(2, "rtx", 1, RTX_4090)]
    big = model(name="big", hf_config=QWEN_7B, weight_bytes=int(16.5 * GIB))
    assert _precise(big, rtx).status == "scheduled"
    assert _precise(big, rtx, chain=margin).status == "unschedulable"
    fits = model(name="fits", hf_config=QWEN_7B, weight_bytes=14 * GIB)
    assert (
        _precise(fits, rtx, chain=margin).candidates[0].kv_tokens
        == _precise(fits, rtx).candidates[0].kv_tokens
    )


def test_the_balance_is_checked_on_what_the_gpus_report_too():
    """Both H100s carry a 12 GiB claim, but only GPU 1's instance uses it (GPU 0's books more than
    its instance takes, or has not started): the ledger sees 68 and 68 GiB free, balanced, while
    SGLang would measure 80 and 68 GiB (67.5 < 0.9 × 79.5 after its context) and refuse to start at
    tp 2. precise checks both views; the claims alone (GPUStack's view) would pass."""
    devices = [
        gpu(0, H100, memory={"total": H100, "used": 0}),
        gpu(1, H100, memory={"total": H100, "used": 12 * GIB}),
    ]
    held = [instance(1, 1, {0: 12 * GIB, 1: 12 * GIB}, model_id=9)]
    tp2 = _qwen(backend_parameters=["--tp-size", "2"])
    result = schedule(request(tp2, [worker(1, "h100", devices)], held, policy="precise"))
    assert result.status == "unschedulable"
    assert any(e.reason == "no_balanced_gpu_set" for e in result.events)
    devices[0]["memory"]["used"] = 12 * GIB  # now both instances use their claims
    assert schedule(request(tp2, [worker(1, "h100", devices)], held, policy="precise")).status == "scheduled"


def test_a_config_naming_a_billion_layers_is_decided_not_built():
    """The per-rank weights are closed-form over the layers: a hostile config naming 2^62 layers and
    2^40 MTP layers is refused like any model too large, without building anything per layer."""
    huge = {
        **QWEN_7B,
        "num_hidden_layers": 2**62,
        "num_nextn_predict_layers": 2**40,
        "first_k_dense_replace": 3,
    }
    result = _precise(
        model(name="huge", hf_config=huge, weight_bytes=QWEN_7B_BYTES), [uniform_worker(1, "h", 2, H100)]
    )
    assert result.status == "unschedulable"
    assert result.error is None
