"""precise's ports of SGLang's start-up rules, each against the upstream function itself
(SGLang 0.5.16, ``tools/sglang-oracle/extra.py``): context length, dtype, KV dtype choices,
architecture lists, environment switches, TP balance, PP split, CUDA-graph backends."""

from __future__ import annotations

import itertools
import random

import pytest
from precise_oracle.support import MODELS, require

require()

import extra  # noqa: E402  (tools/sglang-oracle, importable once require() ran)

from scheduler_core.precise import startup  # noqa: E402
from scheduler_core.precise.fraction import Device, ModelTraits, RuntimeFlags  # noqa: E402
from scheduler_core.precise.graphs import decode_backend, prefill_backend  # noqa: E402
from scheduler_core.precise.weights import stage_layers  # noqa: E402

_ROPES = (
    None,
    {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192},
    {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
    {"type": "linear", "factor": 2.0},
    {"rope_type": "dynamic", "factor": 3.0},
    {},
)
_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")


def test_the_context_length_is_sglangs() -> None:
    """``get_context_length`` over every subset of the length keys and RoPE scalings."""
    base = dict(MODELS["Qwen2.5-7B"])
    for key in _KEYS:
        base.pop(key, None)
    for count in range(len(_KEYS) + 1):
        for keys in itertools.combinations(_KEYS, count):
            for rope in _ROPES:
                config = {**base, **{k: 1000 * (i + 2) for i, k in enumerate(keys)}, "rope_scaling": rope}
                assert startup.context_length(config) == extra.model_config(config).context_len, (keys, rope)


@pytest.mark.parametrize("declared", ["bfloat16", "float16", "float32", None])
@pytest.mark.parametrize("model_type", ["llama", "gemma", "gemma2", "gemma3_text", "qwen2"])
@pytest.mark.parametrize("flag", [None, "auto", "half", "float16", "bfloat16", "float", "float32"])
def test_the_running_dtype_is_sglangs(declared: str | None, model_type: str, flag: str | None) -> None:
    """``_get_and_verify_dtype``: float32 (or nothing) runs as float16, Gemma as bfloat16."""
    config = {**MODELS["Qwen2.5-7B"], "model_type": model_type, "torch_dtype": declared}
    ours = startup.running_dtype(config, flag)
    theirs = extra.model_config(config, dtype=flag or "auto").dtype
    assert {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}[theirs] == ours


def test_the_kv_cache_dtype_choices_and_refusals_are_sglangs() -> None:
    """argparse's choices, and what ``configure_kv_cache_dtype`` refuses or allocates."""
    assert startup.KV_CACHE_DTYPE_CHOICES == tuple(extra.KV_CACHE_DTYPE_CHOICES)
    for flag in (*extra.KV_CACHE_DTYPE_CHOICES, "fp16", "float16", "FP8_E4M3", "int8"):
        for model_dtype, quant in (("bf16", None), ("fp16", "FP8"), ("fp16", None)):
            try:
                theirs = extra.kv_cache_dtype(flag, model_dtype, quant)
            except ValueError:
                theirs = None
            refused = startup.fatal_argument(
                startup_params(["--kv-cache-dtype", flag]), MODELS["Qwen2.5-7B"], None
            )
            assert (refused is not None) == (theirs is None), flag
            if theirs is not None:
                ours = startup.kv_element(
                    flag, {"bf16": "bfloat16", "fp16": "float16"}[model_dtype], quant == "FP8"
                )
                assert ours == {"bf16": "bfloat16", "fp16": "float16", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
                                "fp4": "fp4"}[theirs], flag  # fmt: skip


def startup_params(argv: list[str]):
    from scheduler_core.params import BackendParameters

    return BackendParameters(argv)


def test_the_architecture_lists_are_sglangs() -> None:
    """The multimodal, CUDA-graph and MLA architectures, read from SGLang's own model config."""
    assert set(extra._MC["multimodal_model_archs"]) == startup.MULTIMODAL_ARCHITECTURES
    assert (
        set(extra._MC["multimodal_piecewise_cuda_graph_supported_model_archs"])
        == startup.MULTIMODAL_PIECEWISE
    )
    assert (
        set(extra._MC["multimodal_breakable_cuda_graph_supported_model_archs"])
        == startup.MULTIMODAL_BREAKABLE
    )
    assert set(extra._MC["piecewise_cuda_graph_disabled_model_archs"]) == startup.PIECEWISE_DISABLED
    mla = dict(MODELS["DeepSeek-V3"])
    for arch in sorted(
        startup.MLA_ARCHITECTURES | {"LlamaForCausalLM", "Qwen2ForCausalLM", "Glm4MoeForCausalLM"}
    ):
        config = {**mla, "architectures": [arch], "head_dim": 128}
        if arch == "PixtralForConditionalGeneration":
            continue  # MLA only with a kv_lora_rank in its text config
        expected = extra.model_config(config).attention_arch == "MLA"
        assert (arch in startup.MLA_ARCHITECTURES) == expected, arch


@pytest.mark.parametrize("value", ["1", "0", "true", "False", "YES", "n", "maybe", "", None])
def test_environment_switches_read_as_sglangs_envbool(value: str | None) -> None:
    """``EnvBool``: true/1/yes/y, false/0/no/n, anything else keeps the default."""
    env = {} if value is None else {"X": value}
    for default in (True, False):
        assert startup.env_flag(env, "X", default) == extra.Env(env, {"X": default}).X.get()


def test_the_tp_balance_is_sglangs() -> None:
    """``_check_tp_memory_balance`` on random rank pairs near the 0.9 threshold, check on and off."""
    rng = random.Random(5)
    for _ in range(400):
        least, local = sorted(rng.uniform(10, 140) for _ in range(2))
        local = max(local, least / rng.uniform(0.85, 0.95))
        for env in ({}, {"SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK": "0"}):
            try:
                extra.tp_balance(least, local, env)
                theirs = True
            except RuntimeError:
                theirs = False
            ours = not startup.balance_checked(env) or least >= 0.9 * local
            assert ours == theirs, (least, local, env)


def test_the_pp_split_is_sglangs() -> None:
    """``get_pp_indices``: the last ``L mod pp`` stages hold one more layer."""
    for layers in range(1, 130):
        for pp in range(1, 9):
            if pp <= layers:
                assert [(r.start, r.stop) for r in stage_layers(layers, pp)] == extra.pp_layers(layers, pp)


_GRAPH_FLAGS = (
    {},
    {"disable_cuda_graph": True},
    {"disable_prefill_cuda_graph": True},
    {"disable_decode_cuda_graph": True},
    {"enable_lora": True},
    {"moe_a2a_backend": "deepep"},
    {"attn_cp_size": 2},
    {"dcp_size": 2},
    {"enable_dp_attention": True},
    {"disaggregation_mode": "prefill"},
    {"disaggregation_mode": "decode"},
    {"cuda_graph_backend_prefill": "breakable", "enable_lora": True},
    {"cuda_graph_backend_decode": "disabled"},
    {"enable_torch_compile": True},
)
_OURS = {
    "disable_cuda_graph": "cuda_graph_disabled",
    "disable_prefill_cuda_graph": "prefill_graph_disabled",
    "disable_decode_cuda_graph": "decode_graph_disabled",
    "enable_lora": "lora",
    "moe_a2a_backend": "moe_a2a_backend",
    "attn_cp_size": "attn_cp_size",
    "dcp_size": "dcp_size",
    "enable_dp_attention": "enable_dp_attention",
    "disaggregation_mode": "disaggregation_mode",
    "cuda_graph_backend_prefill": "prefill_graph_backend",
    "cuda_graph_backend_decode": "decode_graph_backend",
    "enable_torch_compile": "piecewise_blocked",
}


@pytest.mark.parametrize("fields", _GRAPH_FLAGS)
@pytest.mark.parametrize("name", ["Qwen2.5-7B", "DeepSeek-V3", "Qwen2.5-VL-7B"])
@pytest.mark.parametrize(("platform", "pp"), [("cuda", 1), ("cuda", 2), ("rocm", 1)])
def test_the_cuda_graph_backends_are_sglangs(fields: dict, name: str, platform: str, pp: int) -> None:
    """``_parse_cuda_graph_config`` + ``_apply_cuda_graph_compatibility`` + disaggregation roles."""
    config = MODELS[name]
    mc = extra.model_config(config)
    sa = extra.server_args(mc, 81559, hip=platform == "rocm", pp_size=pp, **fields)
    flags = RuntimeFlags(**{_OURS[key]: value for key, value in fields.items()})
    archs = tuple(config["architectures"])
    traits = ModelTraits(
        mla=mc.attention_arch == "MLA",
        multimodal=mc.is_multimodal,
        vision_config=None,
        context_len=mc.context_len,
        multimodal_piecewise=mc.is_multimodal_piecewise_cuda_graph_supported,
        multimodal_breakable=mc.is_multimodal_breakable_cuda_graph_supported,
        piecewise_disabled=any(a in startup.PIECEWISE_DISABLED for a in archs),
    )
    device = Device(81559, platform)
    assert prefill_backend(device, traits, flags, pp) == sa.cuda_graph_config.prefill.backend
    assert decode_backend(flags) == sa.cuda_graph_config.decode.backend
