"""SGLang's default ``--mem-fraction-static`` and the memory it keeps outside the pool.

A port of ``python/sglang/srt/server_args.py: ServerArgs._handle_gpu_memory_settings``
of sglang 0.5.16 (with ``reserve_for_graph_mb``, ``reserve_for_deepep_a2a_mb`` and
``adjust_mem_fraction_for_vlm``; the CUDA-graph backends it reads come from
:mod:`scheduler_core.precise.graphs`), evaluated per *candidate*: ``gpu_mem`` is the
smallest total among the candidate's own GPUs (SGLang takes the minimum over the
visible devices) and ``tp``/``pp`` are the ones the candidate launches with.
GPUStack's port (:mod:`scheduler_core.mem_fraction`, upstream ``037c3982``) stays
as it is for ``policy: gpustack``. Sizes are MiB, as upstream.

Differences from GPUStack's port that change numbers: the speculative-decoding reserve
is gone (the draft's KV is charged per token instead), the decode-graph term counts
only when the decode graph is on, the prefill graph (on by default on CUDA) reserves
``8 MiB × len(capture list)``, or 1.5 GiB with an MLA backend, before the 10 GiB floor,
DeepEP all-to-all adds 2 GiB after the floor, NPUs have their own tiers, and the VLM
adjustment is skipped with ``--language-only`` and for a config without ``vision_config``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler_core.mem_fraction import FALLBACK_FRACTION
from scheduler_core.params import BackendParameters
from scheduler_core.precise.graphs import DISABLED, decode_backend, prefill_backend
from scheduler_core.sglang_args import DP_NAMES, SGLANG_0_5_16_TIERS

_NPU_PAGE_SIZE = 128

_BASE_RESERVE = 512
_MIN_ACTIVATION_TOKENS = 2048
_MIB_PER_ACTIVATION_TOKEN = 1.5
_LARGE_GPU_MIB = 60 * 1024
_LARGE_GPU_FLOOR = 10 * 1024
_DEEPEP_RESERVE = 2 * 1024
_MLA_PREFILL_GRAPH = 1.5 * 1024
#: Prefill capture bound with an MLA backend, and for a ``llama-2`` model path.
_MLA_PREFILL_MAX_BS, _LLAMA_2_PREFILL_MAX_BS = 2048, 4096
_MIB_PER_PREFILL_GRAPH = 8
_DEFAULT_MAX_PREFILL_TOKENS = 16384
#: ROCm's aiter attention backend shrinks the fraction for long contexts.
_AITER_FACTOR = 0.85
_AITER_CONTEXT = 8192
#: KV heads per rank for which SGLang picks aiter for an MLA model on ROCm (else triton).
_AITER_MLA_HEADS = (16, 128)

#: ``adjust_mem_fraction_for_vlm``: ViT-L/14 baseline, base factor, sensitivity, clamp.
_VIT_BASE = (24, 1024)
_VLM_BASE_FACTOR, _VLM_SENSITIVITY, _VLM_CLAMP = 0.95, 0.1, (0.8, 1.05)

#: Prefill CUDA-graph capture sizes: (start, stop inclusive, step) runs, cut at max_bs.
_PREFILL_RUNS = ((4, 32, 4), (48, 256, 16), (288, 512, 32), (576, 1024, 64), (1280, 4096, 256))
_PREFILL_TAIL_START, _PREFILL_TAIL_STEP = 4608, 512


#: Speculative algorithms that draft with the checkpoint's own MTP layers when no draft model is given.
_SPECULATIVE_WITH_MTP = ("EAGLE", "NEXTN")
#: Flags that switch the ``tc_piecewise`` prefill graph off
#: (``_disable_tc_piecewise_cudagraph_if_incompatible``).
_PIECEWISE_BLOCKERS = (
    "enable-torch-compile",
    "enable-hierarchical-cache",
    "enable-deterministic-inference",
    "enable-symm-mem",
    "enable-eplb",
    "debug-cuda-graph",
    "enable-dsa-prefill-context-parallel",
)


@dataclass(frozen=True, slots=True)
class RuntimeFlags:
    """The SGLang flags the memory rules read (hashable: a rule input).

    ``None`` means "not given": SGLang's tier default applies.
    """

    user_fraction: float | None = None
    chunked_prefill_size: int | None = None
    decode_max_bs: int | None = None
    prefill_max_bs: int | None = None
    max_prefill_tokens: int | None = None
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    dp_size: int = 1
    enable_dp_attention: bool = False
    disaggregation_mode: str | None = None
    moe_a2a_backend: str | None = None
    cuda_graph_disabled: bool = False
    prefill_graph_disabled: bool = False
    decode_graph_disabled: bool = False
    prefill_graph_backend: str | None = None
    decode_graph_backend: str | None = None
    piecewise_blocked: bool = False
    lora: bool = False
    attn_cp_size: int = 1
    dcp_size: int = 1
    language_only: bool = False
    context_length: int | None = None
    page_size: int | None = None
    kv_cache_dtype: str = "auto"
    dtype: str | None = None
    speculative_algorithm: str | None = None
    speculative_draft_model: bool = False
    speculative_draft_tokens: int | None = None
    attention_backend: str | None = None
    enable_multimodal: bool | None = None
    #: ``llama-2`` in ``--model-path`` caps the prefill capture list at 4,096 tokens.
    llama_2_path: bool = False

    @property
    def moe_a2a(self) -> bool:
        """A MoE all-to-all backend other than ``none`` is set."""
        return self.moe_a2a_backend not in (None, "none")

    @property
    def drafts_with_mtp(self) -> bool:
        """Speculative decoding drafts with the checkpoint's own MTP layers (NEXTN, or EAGLE
        without a separate draft model): SGLang loads them."""
        algorithm = (self.speculative_algorithm or "").upper()
        return algorithm in _SPECULATIVE_WITH_MTP and not self.speculative_draft_model

    @classmethod
    def from_parameters(
        cls, params: BackendParameters, lora: bool = False, model_path: str = ""
    ) -> RuntimeFlags:
        """Read the flags (the deprecated ``--cuda-graph-max-bs`` is an alias of the decode one);
        ``lora``: the model has LoRA adapters (SGLang then serves with ``--lora-paths``)."""
        mode = params.find(["disaggregation-mode"])
        return cls(
            **_sizes(params),
            **_graph_switches(params),
            dp_size=params.find_int(DP_NAMES) or 1,
            enable_dp_attention=params.find_bool(["enable-dp-attention"]),
            disaggregation_mode=None if mode in (None, "null") else mode,
            moe_a2a_backend=params.find(["moe-a2a-backend"]),
            lora=lora or params.find_bool(["enable-lora"]) or params.has(["lora-paths"]),
            attn_cp_size=params.find_int(["attn-cp-size"]) or 1,
            dcp_size=params.find_int(["dcp-size"]) or 1,
            language_only=params.find_bool(["language-only"]),
            kv_cache_dtype=params.find(["kv-cache-dtype"]) or "auto",
            dtype=params.find(["dtype"]),
            speculative_algorithm=params.find(["speculative-algorithm"]),
            speculative_draft_model=params.has(["speculative-draft-model-path"]),
            attention_backend=params.find(["attention-backend"]),
            enable_multimodal=True if params.find_bool(["enable-multimodal"]) else None,
            llama_2_path="llama-2" in model_path.lower(),
        )


def _sizes(params: BackendParameters) -> dict[str, Any]:
    return {
        "user_fraction": params.find_float(["mem-fraction-static"]),
        "chunked_prefill_size": params.find_int(["chunked-prefill-size"]),
        "decode_max_bs": params.find_int(["cuda-graph-max-bs-decode", "cuda-graph-max-bs"]),
        "prefill_max_bs": params.find_int(["cuda-graph-max-bs-prefill"]),
        "max_prefill_tokens": params.find_int(["max-prefill-tokens"]),
        "max_running_requests": params.find_int(["max-running-requests"]),
        "max_total_tokens": params.find_int(["max-total-tokens"]),
        "context_length": params.find_int(["context-length"]),
        "page_size": params.find_int(["page-size"]),
        "speculative_draft_tokens": params.find_int(["speculative-num-draft-tokens"]),
    }


def _graph_switches(params: BackendParameters) -> dict[str, Any]:
    return {
        "cuda_graph_disabled": params.find_bool(["disable-cuda-graph"]),
        "prefill_graph_disabled": params.find_bool(["disable-prefill-cuda-graph"]),
        "decode_graph_disabled": params.find_bool(["disable-decode-cuda-graph"]),
        "prefill_graph_backend": params.find(["cuda-graph-backend-prefill"]),
        "decode_graph_backend": params.find(["cuda-graph-backend-decode"]),
        "piecewise_blocked": any(params.find_bool([name]) for name in _PIECEWISE_BLOCKERS)
        or (params.find_float(["cpu-offload-gb"]) or 0) > 0
        or params.find(["expert-distribution-recorder-mode"]) is not None
        or params.find(["load-format"]) == "gguf"
        or params.find(["quantization"]) == "gguf"
        or params.find(["dllm-algorithm"]) is not None,
    }


@dataclass(frozen=True, slots=True)
class Device:
    """What the rules read of the candidate's GPUs: the smallest total (MiB) and the platform."""

    gpu_mem_mib: float
    platform: str  # "cuda", "rocm", "npu" or "other"


@dataclass(frozen=True, slots=True)
class ModelTraits:
    """What the rules read of the model, as SGLang's ``ModelConfig`` derives it."""

    mla: bool
    multimodal: bool
    vision_config: Mapping[str, Any] | None = field(hash=False)
    context_len: int
    #: The config's KV heads (SGLang's ``ModelConfig.get_total_num_kv_heads``; 0: unknown).
    kv_heads: int = 0
    #: Multimodal and validated for the ``tc_piecewise`` / ``breakable`` prefill graph.
    multimodal_piecewise: bool = False
    multimodal_breakable: bool = False
    #: On ``piecewise_cuda_graph_disabled_model_archs``.
    piecewise_disabled: bool = False
    deepseek_v4: bool = False


@dataclass(frozen=True, slots=True)
class Sizing:
    """SGLang's sizes for one candidate: the tier values, the reserve and the fraction.

    ``launch`` is the value to pass as ``--mem-fraction-static`` (the user's, or the
    heuristic with the VLM factor); ``factor`` is what SGLang still multiplies any
    value by (ROCm aiter); ``fraction = launch × factor`` sizes the pool.
    ``reserve_mib`` is what the default fraction leaves (with the 10 GiB floor),
    ``runtime_reserve_mib`` the memory the runtime allocates beside the pool (without it).
    """

    chunked_prefill_size: int
    decode_max_bs: int
    reserve_mib: float
    launch: float
    factor: float
    page_size: int
    runtime_reserve_mib: float

    @property
    def fraction(self) -> float:
        """The fraction the pool is really sized with."""
        return self.launch * self.factor


def tier(device: Device, tp: int, flags: RuntimeFlags) -> tuple[int, int]:
    """``(chunked_prefill_size, decode max_bs)``: user values, else the NPU or generic tier."""
    chunk, bs = SGLANG_0_5_16_TIERS.defaults(device.gpu_mem_mib, device.platform == "npu", tp)
    return (
        flags.chunked_prefill_size if flags.chunked_prefill_size is not None else chunk,
        flags.decode_max_bs if flags.decode_max_bs is not None else bs,
    )


def prefill_capture_count(max_bs: int) -> int:
    """How many prefill CUDA-graph batch sizes SGLang captures up to ``max_bs``."""
    count = 0
    for start, stop, step in _PREFILL_RUNS:
        count += len(range(start, min(stop, max_bs) + 1, step))
    if max_bs >= _PREFILL_TAIL_START:
        count += len(range(_PREFILL_TAIL_START, max_bs + 1, _PREFILL_TAIL_STEP))
    return count


def prefill_max_bs(model: ModelTraits, flags: RuntimeFlags, chunk: int) -> int:
    """The largest prefill batch SGLang captures: ``--cuda-graph-max-bs-prefill``, else the chunk
    (2,048 with an MLA backend), capped by ``--max-total-tokens`` and at 4,096 for a ``llama-2``
    path; ``--context-length`` clamps even a given value."""
    max_bs = flags.prefill_max_bs
    if max_bs is None:
        max_bs = _MLA_PREFILL_MAX_BS if model.mla else chunk
        if flags.max_total_tokens is not None:
            max_bs = min(max_bs, flags.max_total_tokens)
        if flags.llama_2_path:
            max_bs = min(max_bs, _LLAMA_2_PREFILL_MAX_BS)
    if flags.context_length is not None:
        max_bs = min(max_bs, flags.context_length)
    return max_bs


def _graph_reserve(
    device: Device, model: ModelTraits, flags: RuntimeFlags, pp: int, chunk: int, bs: int
) -> float:
    """``reserve_for_graph_mb``."""
    reserve = 0.0
    if flags.disaggregation_mode != "prefill" and decode_backend(flags) != DISABLED:
        reserve += bs * 2
    if flags.enable_dp_attention and flags.disaggregation_mode != "prefill":
        reserve += bs * flags.dp_size * 3
        if bs > 300:
            reserve += bs * flags.dp_size * 1.5
    if flags.disaggregation_mode != "decode" and prefill_backend(device, model, flags, pp) != DISABLED:
        captured = prefill_capture_count(prefill_max_bs(model, flags, chunk))
        reserve += _MLA_PREFILL_GRAPH if model.mla else captured * _MIB_PER_PREFILL_GRAPH
    return reserve


def _activation_tokens(flags: RuntimeFlags, chunk: int, bs: int) -> int:
    if flags.disaggregation_mode == "decode":
        running = flags.max_running_requests or bs or 1
        return max(running * (flags.speculative_draft_tokens or 1), _MIN_ACTIVATION_TOKENS)
    if chunk > 0:
        return max(chunk, _MIN_ACTIVATION_TOKENS)
    return max(flags.max_prefill_tokens or _DEFAULT_MAX_PREFILL_TOKENS, _MIN_ACTIVATION_TOKENS)


def reserve_mib(
    device: Device, model: ModelTraits, flags: RuntimeFlags, tp: int, pp: int, *, floor: bool = True
) -> float:
    """Memory SGLang keeps outside its static pool for activations and CUDA graphs (MiB).

    ``floor=False`` leaves out the 10 GiB minimum on GPUs above 60 GiB: that floor is
    a margin of the *default* fraction, not memory the runtime allocates.
    """
    chunk, bs = tier(device, tp, flags)
    floored, runtime = _reserves(device, model, flags, tp, pp, chunk, bs)
    return floored if floor else runtime


def _reserves(
    device: Device, model: ModelTraits, flags: RuntimeFlags, tp: int, pp: int, chunk: int, bs: int
) -> tuple[float, float]:
    """:func:`reserve_mib` with and without the floor, for the tier values ``chunk`` and ``bs``."""
    tokens = _activation_tokens(flags, chunk, bs)
    reserved = _BASE_RESERVE + tokens * _MIB_PER_ACTIVATION_TOKEN + tp * pp / 8 * 1024
    reserved += _graph_reserve(device, model, flags, pp, chunk, bs)
    floored = max(reserved, _LARGE_GPU_FLOOR) if device.gpu_mem_mib > _LARGE_GPU_MIB else reserved
    deepep = (
        flags.disaggregation_mode != "prefill"
        and decode_backend(flags) != DISABLED
        and flags.moe_a2a_backend == "deepep"
    )
    if deepep:
        return floored + _DEEPEP_RESERVE, reserved + _DEEPEP_RESERVE
    return floored, reserved


def vlm_factor(vision_config: Mapping[str, Any]) -> float:
    """The VLM multiplier: ``0.95 × clamp(1 − 0.1 × (L·H² / (24·1024²) − 1), 0.8, 1.05)``
    (not re-rounded in current SGLang).

    ``L`` is the vision config's ``num_hidden_layers`` and ``H`` its ``hidden_size``, read
    with ``getattr`` and defaults 24 and 1024: Qwen2.5-VL's vision config names its depth
    ``depth`` (transformers' ``Qwen2_5_VLVisionConfig`` has no ``num_hidden_layers``), so
    SGLang sizes its 32-layer ViT as 24 layers.
    """
    layers = _size(vision_config.get("num_hidden_layers"), _VIT_BASE[0])
    hidden = _size(vision_config.get("hidden_size"), _VIT_BASE[1])
    ratio = (layers * hidden**2) / (_VIT_BASE[0] * _VIT_BASE[1] ** 2)
    factor = max(_VLM_CLAMP[0], min(_VLM_CLAMP[1], 1.0 - _VLM_SENSITIVITY * (ratio - 1.0)))
    return _VLM_BASE_FACTOR * factor


def _size(value: Any, default: int) -> float:
    """A config number, else the default (``getattr``'s default stands for a missing key)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else float(default)


def vlm_adjusted(fraction: float, model: ModelTraits, flags: RuntimeFlags) -> float:
    """The heuristic's VLM rule (skipped for a user's fraction and with ``--language-only``)."""
    vision = model.vision_config
    if flags.user_fraction is None and model.multimodal and not flags.language_only and vision is not None:
        return fraction * vlm_factor(vision)
    return fraction


def uses_aiter(device: Device, model: ModelTraits, flags: RuntimeFlags, tp: int) -> bool:
    """Whether SGLang runs the aiter attention backend (``srt/server_args.py``,
    ``ServerArgs._get_default_attn_backend``): the user's ``--attention-backend`` when
    given; else on ROCm, for an MHA/GQA model always, for an MLA model only when its KV
    heads per rank (``max(1, heads // tp)``, ``ModelConfig.get_num_kv_heads``) are 16 or
    128 (triton otherwise)."""
    if flags.attention_backend is not None:
        return flags.attention_backend == "aiter"
    if device.platform != "rocm":
        return False
    return not model.mla or max(1, model.kv_heads // max(tp, 1)) in _AITER_MLA_HEADS


def aiter_factor(device: Device, model: ModelTraits, flags: RuntimeFlags, tp: int) -> float:
    """With the aiter attention backend (:func:`uses_aiter`) SGLang multiplies *any*
    fraction, the user's included, by 0.85 when the context exceeds 8,192 tokens."""
    if model.context_len > _AITER_CONTEXT and uses_aiter(device, model, flags, tp):
        return _AITER_FACTOR
    return 1.0


def sizing(device: Device, model: ModelTraits, flags: RuntimeFlags, tp: int, pp: int) -> Sizing:
    """SGLang's sizes for a candidate with these GPUs and ``tp``/``pp``.

    The launch value is the user's when given, else ``round((gpu_mem − reserve) / gpu_mem, 3)``
    (0.88 when the memory is unknown) with the VLM rule; then :func:`aiter_factor` applies.
    """
    chunk, bs = tier(device, tp, flags)
    reserve, runtime = _reserves(device, model, flags, tp, pp, chunk, bs)
    if flags.user_fraction is not None:
        fraction = flags.user_fraction
    elif device.gpu_mem_mib > 0:
        fraction = round((device.gpu_mem_mib - reserve) / device.gpu_mem_mib, 3)
    else:
        fraction = FALLBACK_FRACTION
    page = flags.page_size or (_NPU_PAGE_SIZE if device.platform == "npu" else 1)
    launch = vlm_adjusted(fraction, model, flags)
    factor = aiter_factor(device, model, flags, tp)
    return Sizing(chunk, bs, reserve, launch, factor, max(page, 1), runtime)
