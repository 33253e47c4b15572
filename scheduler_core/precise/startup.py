"""What SGLang decides from a config and its flags before it touches GPU memory.

``policy: precise`` follows SGLang **0.5.16** (the PyPI release its tests execute; see
docs/policy-precise.md for how it differs from ``bd3f6a793``). Each rule names its source in
``python/sglang/srt/``:

* the dtype the weights run in (``configs/model_config.py: _get_and_verify_dtype``):
  ``--dtype auto`` runs a float32 config (or one naming no dtype) as float16, bfloat16 for
  Gemma (``model_type`` starting with ``gemma``); an explicit ``--dtype`` wins;
* the context length (``utils/hf_transformers/common.py: get_context_length``): the first
  of ``max_sequence_length``, ``seq_length``, ``max_seq_len``, ``model_max_length``,
  ``max_position_embeddings`` present, times the RoPE factor unless the scaling names
  ``original_max_position_embeddings`` or is ``llama3``; 2,048 when none;
* the KV-cache dtype (``server_args.py`` choices, ``mem_cache/kv_cache_dtype.py:
  configure_kv_cache_dtype``);
* the arguments SGLang stops on (:func:`fatal_argument`), and the environment switches
  read from the model's ``env`` (``environ.py``: ``EnvBool``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler_core.params import BackendParameters

# --------------------------------------------------------------------------- dtype

#: ``--dtype`` values SGLang knows (``_STR_DTYPE_TO_TORCH_DTYPE``) → the dtype they run.
_DTYPES: Mapping[str, str] = {
    "half": "float16",
    "float16": "float16",
    "float": "float32",
    "float32": "float32",
    "bfloat16": "bfloat16",
}
#: Bytes per element of each running dtype.
DTYPE_BYTES: Mapping[str, int] = {"float16": 2, "bfloat16": 2, "float32": 4}


def config_dtype(text: Mapping[str, Any]) -> str | None:
    """The dtype a config names (``dtype`` before ``torch_dtype``, as transformers v5 reads it)."""
    raw = text.get("dtype") or text.get("torch_dtype")
    return _DTYPES.get(raw) if isinstance(raw, str) else None


def running_dtype(text: Mapping[str, Any], flag: str | None) -> str:
    """The dtype SGLang runs the weights in, for ``--dtype`` ``flag`` (None: ``auto``)."""
    chosen = (flag or "auto").lower()
    if chosen != "auto":
        return _DTYPES.get(chosen, "bfloat16")  # an unknown value is rejected by fatal_argument
    declared = config_dtype(text) or "float32"  # no dtype: SGLang takes the config as float32
    if declared != "float32":
        return declared
    model_type = text.get("model_type")
    return "bfloat16" if isinstance(model_type, str) and model_type.startswith("gemma") else "float16"


# --------------------------------------------------------------------------- context

_CONTEXT_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)
_DEFAULT_CONTEXT = 2048


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def context_length(text: Mapping[str, Any]) -> int:
    """SGLang's derived context length of a text config (``get_context_length``)."""
    rope = text.get("rope_scaling")
    factor = 1.0
    if isinstance(rope, Mapping) and rope:
        factor = _number(rope.get("factor", 1)) or 1.0
        if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
            factor = 1.0
    for key in _CONTEXT_KEYS:
        value = _number(text.get(key))
        if value is not None:
            return int(factor * value)
    return _DEFAULT_CONTEXT


# --------------------------------------------------------------------------- environment

_TRUE, _FALSE = ("true", "1", "yes", "y"), ("false", "0", "no", "n")
#: ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN`` (default False): a longer ``--context-length``.
ALLOW_LONGER_CONTEXT = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
#: ``SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK`` (default True), and the deprecated name whose
#: value SGLang copies into it (``environ.py: _convert_SGL_to_SGLANG``).
BALANCE_CHECK = "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK"
_BALANCE_CHECK_OLD = "SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK"


def env_flag(env: Mapping[str, str] | None, name: str, default: bool) -> bool:
    """``EnvBool.get``: true/1/yes/y or false/0/no/n (any case); anything else keeps the default."""
    raw = (env or {}).get(name)
    if raw is None:
        return default
    value = raw.lower()
    if value in _TRUE:
        return True
    return default if value not in _FALSE else False


def balance_checked(env: Mapping[str, str] | None) -> bool:
    """Whether SGLang checks its TP ranks' memory balance at start-up (on unless the env says so)."""
    values = dict(env or {})
    if BALANCE_CHECK not in values and _BALANCE_CHECK_OLD in values:
        values[BALANCE_CHECK] = values[_BALANCE_CHECK_OLD]
    return env_flag(values, BALANCE_CHECK, True)


# --------------------------------------------------------------------------- KV dtype

#: ``--kv-cache-dtype`` choices (``ServerArgs.kv_cache_dtype``); argparse refuses anything else.
KV_CACHE_DTYPE_CHOICES = (
    "auto",
    "fp8_e5m2",
    "fp8_e4m3",
    "mxfp8",
    "bf16",
    "bfloat16",
    "nvfp4",
    "fp4_mx_block16",
    "fp4_e2m1",
)
#: ``configure_kv_cache_dtype`` refuses this one (renamed).
_FP4_RENAMED = "fp4_e2m1"
#: The flags whose cache packs two FP4 values per byte (``float4_e2m1fn_x2``).
FP4_KV = ("nvfp4", "fp4_mx_block16")


def kv_element(flag: str, model_dtype: str, fp8_checkpoint_kv: bool) -> str:
    """The KV element SGLang allocates: ``fp8``, ``fp4``, ``bfloat16``, or the model's dtype."""
    if flag == "auto":
        return "fp8" if fp8_checkpoint_kv else model_dtype
    if flag in ("bf16", "bfloat16"):
        return "bfloat16"
    return "fp4" if flag in FP4_KV else "fp8"


# --------------------------------------------------------------------------- fatal arguments


def _longer_context(
    params: BackendParameters, text: Mapping[str, Any], env: Mapping[str, str] | None
) -> str | None:
    asked = params.find_int(["context-length"])
    derived = context_length(text)
    if asked is None or asked <= derived or env_flag(env, ALLOW_LONGER_CONTEXT, False):
        return None
    return (
        f"SGLang refuses --context-length {asked}: it is greater than the model's derived context "
        f"length ({derived}); set {ALLOW_LONGER_CONTEXT}=1 in the model's env to allow it"
    )


def _kv_dtype(params: BackendParameters) -> str | None:
    flag = params.find(["kv-cache-dtype"])
    if flag is None:
        return None
    if flag not in KV_CACHE_DTYPE_CHOICES:
        choices = ", ".join(repr(c) for c in KV_CACHE_DTYPE_CHOICES)
        return f"SGLang refuses --kv-cache-dtype {flag}: invalid choice: {flag!r} (choose from {choices})"
    if flag == _FP4_RENAMED:
        return (
            "SGLang refuses --kv-cache-dtype fp4_e2m1: it is deprecated. Use --kv-cache-dtype=fp4_mx_block16."
        )
    return None


def _dtype(params: BackendParameters) -> str | None:
    flag = params.find(["dtype"])
    if flag is None or flag.lower() == "auto" or flag.lower() in _DTYPES:
        return None
    return f"SGLang refuses --dtype {flag}: Unknown dtype: {flag.lower()}"


def fatal_argument(
    params: BackendParameters, text: Mapping[str, Any] | None, env: Mapping[str, str] | None
) -> str | None:
    """SGLang's reason for refusing to start with these arguments, or None.

    ``--kv-cache-dtype`` outside SGLang's choices (``fp16``/``float16`` among them) and the
    renamed ``fp4_e2m1``; an unknown ``--dtype``; ``--context-length`` above the model's
    unless ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN`` is set in ``env``.
    """
    checks: Sequence[str | None] = (
        _kv_dtype(params),
        _dtype(params),
        None if text is None else _longer_context(params, text, env),
    )
    return next((reason for reason in checks if reason is not None), None)


# --------------------------------------------------------------------------- architectures

#: ``ModelConfig._derive_model_shapes``: the architectures SGLang runs with MLA attention.
MLA_ARCHITECTURES = frozenset(
    {
        "DeepseekV2ForCausalLM",
        "DeepseekV32ForCausalLM",
        "DeepseekV3ForCausalLM",
        "DeepseekV3ForCausalLMNextN",
        "Glm4MoeLiteForCausalLM",
        "Glm4MoeLiteForCausalLMNextN",
        "GlmMoeDsaForCausalLM",
        "GlmMoeDsaForCausalLMNextN",
        "LongcatFlashForCausalLM",
        "LongcatFlashForCausalLMNextN",
        "DotsVLMForCausalLM",
        "MistralLarge3ForCausalLM",
        "MistralLarge3ForCausalLMEagle",
        "KimiK25ForConditionalGeneration",
        "Eagle3DeepseekV2ForCausalLM",
        "MiniCPM3ForCausalLM",
        "DeepseekVL2ForCausalLM",
        "KimiVLForConditionalGeneration",
        "KimiLinearForCausalLM",
        "BailingMoeV2_5ForCausalLM",
        "BailingMoeForCausalLMNextN",
        "SarvamMLAForCausalLM",
    }
)
#: ``configs/model_config.py: multimodal_model_archs`` (``MIMO_V2_MULTIMODAL_ARCHS`` inlined).
MULTIMODAL_ARCHITECTURES = frozenset(
    {
        "CLIPModel", "Cohere2VisionForConditionalGeneration", "DeepseekVL2ForCausalLM",
        "Ernie4_5_VLMoeForConditionalGeneration", "MiniMaxM3SparseForConditionalGeneration",
        "Gemma3ForConditionalGeneration", "Gemma3nForConditionalGeneration", "Gemma4ForConditionalGeneration",
        "Gemma4UnifiedForConditionalGeneration", "Glm4vForConditionalGeneration",
        "Glm4vMoeForConditionalGeneration", "GlmOcrForConditionalGeneration",
        "GlmAsrForConditionalGeneration",
        "GlmImageForConditionalGeneration", "Grok1VForCausalLM", "Grok1AForCausalLM", "LlavaLlamaForCausalLM",
        "Llama4ForConditionalGeneration", "LlavaMistralForCausalLM", "LlavaQwenForCausalLM",
        "LlavaForConditionalGeneration", "LlavaVidForCausalLM", "Lfm2VlForConditionalGeneration",
        "LightOnOCRForConditionalGeneration", "MiMoV2ForCausalLM", "MiMoV2ASRForCausalLM", "MiniCPMO",
        "MiniCPMV", "Mistral3ForConditionalGeneration", "MultiModalityCausalLM",
        "MllamaForConditionalGeneration", "MossVLForConditionalGeneration", "NemotronH_Nano_VL_V2",
        "NemotronH_Nano_Omni_Reasoning_V3", "PixtralForConditionalGeneration",
        "Qwen2AudioForConditionalGeneration", "Qwen2VLForConditionalGeneration",
        "Qwen2_5_VLForConditionalGeneration", "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration", "InternS2PreviewForConditionalGeneration",
        "Qwen3ASRForConditionalGeneration", "Qwen3OmniMoeForConditionalGeneration",
        "KimiVLForConditionalGeneration", "LocateAnythingForConditionalGeneration", "InternVLChatModel",
        "InternS1ForConditionalGeneration", "InternS1ProForConditionalGeneration", "Phi4MMForCausalLM",
        "VoxtralForConditionalGeneration", "WhisperForConditionalGeneration",
        "Step3VLForConditionalGeneration", "POINTSV15ChatModel", "DotsVLMForCausalLM", "DotsOCRForCausalLM",
        "Sarashina2VisionForCausalLM", "NVILAForConditionalGeneration", "NVILALiteForConditionalGeneration",
        "DeepseekOCRForCausalLM", "UnlimitedOCRForCausalLM", "JetVLMForConditionalGeneration",
        "PaddleOCRVLForConditionalGeneration", "MiDashengLMModel", "StepVLForConditionalGeneration",
        "Step3p7ForConditionalGeneration", "KimiK25ForConditionalGeneration",
    }
)  # fmt: skip
#: ``ModelConfig.__init__``: multimodal is off by default for these (first architecture).
_MULTIMODAL_OFF = frozenset(
    {
        "Gemma3ForConditionalGeneration",
        "Llama4ForConditionalGeneration",
        "Step3VLForConditionalGeneration",
        "InklingForConditionalGeneration",
    }
)
#: Multimodal architectures whose prefill SGLang captures with ``tc_piecewise``
#: (``multimodal_piecewise_cuda_graph_supported_model_archs``) or ``breakable``
#: (``multimodal_breakable_cuda_graph_supported_model_archs``).
MULTIMODAL_PIECEWISE = frozenset(
    {
        "Cohere2VisionForConditionalGeneration",
        "KimiK25ForConditionalGeneration",
        "MiniMaxM3SparseForCausalLM",
        "MiniMaxM3SparseForConditionalGeneration",
    }
)
MULTIMODAL_BREAKABLE = frozenset({"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"})
#: ``piecewise_cuda_graph_disabled_model_archs``.
PIECEWISE_DISABLED = frozenset(
    {
        "DeepseekV4ForCausalLM",
        "DeepseekV4ForCausalLMNextN",
        "DeepseekV4ForCausalLMDSpark",
        "Qwen3NextForCausalLM",
        "BailingMoeV2_5ForCausalLM",
        "LLaDAModelLM",
    }
)


def is_multimodal(architectures: Sequence[str], config: Mapping[str, Any], enabled: bool | None) -> bool:
    """SGLang's ``ModelConfig.is_multimodal`` (``--enable-multimodal`` as ``enabled``, None: default)."""
    if not any(arch in MULTIMODAL_ARCHITECTURES for arch in architectures):
        return False
    if enabled is not None:
        return enabled
    first = architectures[0]
    if first in _MULTIMODAL_OFF:
        return False
    if first == "MiMoV2ForCausalLM":
        return "vision_config" in config and "audio_config" in config
    return True
