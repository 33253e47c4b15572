"""SGLang's CUDA-graph backend per phase, which decides the graph part of its reserve.

A port of ``ServerArgs._handle_cuda_graph_config`` (sglang 0.5.16 ``server_args.py``:
``_parse_cuda_graph_config``, ``_apply_cuda_graph_compatibility`` with
``_disable_breakable_cudagraph_if_incompatible`` and
``_disable_tc_piecewise_cudagraph_if_incompatible``, ``_apply_cuda_graph_disaggregation_roles``;
defaults from ``model_executor/cuda_graph_config.py``):

* decode runs ``full``; prefill runs ``breakable`` on CUDA and ``tc_piecewise`` elsewhere,
  ``tc_piecewise`` also for the multimodal architectures validated for it;
* an explicit ``--cuda-graph-backend-{phase}`` wins over ``--disable-{phase}-cuda-graph``,
  which wins over ``--disable-cuda-graph``; any of them *locks* the phase;
* an unlocked breakable prefill graph is turned off for MLA attention, DeepSeek-V4, context
  parallel (``--attn-cp-size`` > 1), decode context parallel (``--dcp-size`` > 1), LoRA, a
  MoE all-to-all backend, DP attention (a 0.5.16 rule that ``bd3f6a793`` no longer has) and
  multimodal models not validated for it; an unlocked ``tc_piecewise`` one by its own list
  (non-CUDA platforms, pp > 1, ...);
* a prefill-disaggregated node turns decode graphs off, a decode node prefill graphs (unless locked).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scheduler_core.precise.fraction import Device, ModelTraits, RuntimeFlags

DISABLED, FULL, BREAKABLE, TC_PIECEWISE = "disabled", "full", "breakable", "tc_piecewise"


def _explicit(backend: str | None, phase_off: bool, all_off: bool) -> str | None:
    """The phase's locked backend, or None when nothing on the command line sets it."""
    if backend is not None:
        return backend
    return DISABLED if phase_off or all_off else None


def decode_backend(flags: RuntimeFlags) -> str:
    """The decode phase's CUDA-graph backend."""
    locked = _explicit(flags.decode_graph_backend, flags.decode_graph_disabled, flags.cuda_graph_disabled)
    if locked is not None:
        return locked
    return DISABLED if flags.disaggregation_mode == "prefill" else FULL


def _breakable_off(model: ModelTraits, flags: RuntimeFlags) -> bool:
    """``_disable_breakable_cudagraph_if_incompatible``'s rules."""
    return (
        model.mla
        or model.deepseek_v4
        or flags.attn_cp_size > 1
        or flags.dcp_size > 1
        or flags.lora
        or flags.moe_a2a
        or flags.enable_dp_attention
        or (model.multimodal and not model.multimodal_breakable)
    )


def _piecewise_off(device: Device, model: ModelTraits, flags: RuntimeFlags, pp: int) -> bool:
    """``_disable_tc_piecewise_cudagraph_if_incompatible``'s rules."""
    return (
        model.piecewise_disabled
        or (model.multimodal and not model.multimodal_piecewise)
        or device.platform != "cuda"
        or pp > 1
        or flags.enable_dp_attention
        or flags.moe_a2a
        or flags.lora
        or flags.disaggregation_mode is not None
        or flags.attn_cp_size > 1
        or flags.dcp_size > 1
        or flags.piecewise_blocked
    )


def prefill_backend(device: Device, model: ModelTraits, flags: RuntimeFlags, pp: int) -> str:
    """The prefill phase's CUDA-graph backend."""
    locked = _explicit(flags.prefill_graph_backend, flags.prefill_graph_disabled, flags.cuda_graph_disabled)
    if locked is not None:
        return locked
    backend = BREAKABLE if device.platform == "cuda" else TC_PIECEWISE
    if backend == BREAKABLE and model.multimodal and model.multimodal_piecewise:
        backend = TC_PIECEWISE
    if backend == BREAKABLE and _breakable_off(model, flags):
        return DISABLED
    if backend == TC_PIECEWISE and _piecewise_off(device, model, flags, pp):
        return DISABLED
    return DISABLED if flags.disaggregation_mode == "decode" else backend
