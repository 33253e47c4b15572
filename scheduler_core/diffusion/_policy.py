"""The tuner's shared predicates and default setters (``auto_tune.py: ServerArgsAutoTuner`` helpers).

Every function reads ``ServerArgsState`` values and the ``TuneContext``;
setters only touch flags that are still None, except where a docstring says
otherwise, and log what they changed.
"""

from __future__ import annotations

from ._layerwise import (
    AUX_GROUP_FLAGS,
    DIT_FLAG,
    DIT_GROUP,
    IMAGE_ENCODER_FLAG,
    TEXT_ENCODER_FLAG,
    selects_dit,
)
from ._state import ServerArgsState, TuneContext

#: Image VAEs are tiny: any datacenter GPU keeps them resident (upstream auto_tune.py).
IMAGE_GEN_KEEP_RESIDENT_MIN_AVAILABLE_GB = 45.0
#: Video VAEs are larger: resident only on very-high-memory GPUs (upstream auto_tune.py).
DEFAULT_KEEP_RESIDENT_MIN_AVAILABLE_GB = 120.0
#: Wan2.2 A14B auto DiT layerwise prefetch: fastest stable value in upstream's sweep.
WAN2_2_A14B_AUTO_PREFETCH_SIZE = 2.0
#: LTX-2.3 resident two-stage mode needs this much total device memory (upstream constant).
LTX2_RESIDENT_AUTO_ENABLE_MEM_GB = 130.0

#: Flags the GPU-resident defaults set to False when unset (``_set_gpu_resident_defaults``).
RESIDENT_FALSE_FLAGS = (
    DIT_FLAG,
    "dit_layerwise_offload",
    TEXT_ENCODER_FLAG,
    IMAGE_ENCODER_FLAG,
)

#: Flags the low-memory component defaults set to True when unset (non-CUDA memory mode).
COMPONENT_OFFLOAD_TRUE_FLAGS = (DIT_FLAG, TEXT_ENCODER_FLAG, IMAGE_ENCODER_FLAG)


def could_override_server_args(args: ServerArgsState) -> bool:
    """Every mode but ``manual`` may fill in unset flags."""
    return args.performance_mode != "manual"


def keep_resident_threshold(ctx: TuneContext) -> float:
    """Free-GiB threshold for residency: per-model pin, else 45 image / 120 other."""
    pinned = ctx.deployment.keep_resident_min_available_gb
    if pinned is not None:
        return pinned
    if ctx.pipeline.is_image_gen:
        return IMAGE_GEN_KEEP_RESIDENT_MIN_AVAILABLE_GB
    return DEFAULT_KEEP_RESIDENT_MIN_AVAILABLE_GB


def has_explicit_parallel_policy(args: ServerArgsState) -> bool:
    """Any parallel knob holds a value (value-based, as upstream checks it)."""
    knobs = (args.tp_size, args.sp_degree, args.ulysses_degree, args.ring_degree)
    return any(knob is not None for knob in knobs) or args.enable_cfg_parallel is not None


def supports_high_confidence_fsdp(ctx: TuneContext) -> bool:
    """The model has an auto-FSDP threshold and, when required, uses CFG by default."""
    deployment = ctx.deployment
    if deployment.fsdp_auto_min_available_memory_gb is None:
        return False
    return not deployment.fsdp_auto_requires_cfg or ctx.pipeline.uses_cfg


def _has_enough_memory_for_fsdp(args: ServerArgsState, ctx: TuneContext) -> bool:
    min_available = ctx.min_available_gib(args)
    if min_available is None:
        return True
    required = ctx.deployment.fsdp_auto_min_available_memory_gb
    if required is None:
        return False
    if min_available < required:
        ctx.log(
            "Skipping automatic FSDP defaults: minimum available memory on selected GPUs "
            f"{min_available:.2f} GiB is below {required:.2f} GiB for "
            f"{ctx.pipeline.config_class}"
        )
        return False
    return True


def can_apply_fsdp_policy(args: ServerArgsState, ctx: TuneContext, *, require_memory_headroom: bool) -> bool:
    """Whether the tuner may pick FSDP for this model (``_can_apply_fsdp_policy``).

    Speed mode passes ``require_memory_headroom=False``: it ignores the GiB
    threshold but still needs the model to declare one.
    """
    if not supports_high_confidence_fsdp(ctx):
        return False
    if ctx.cache_dit_enabled:
        ctx.log("Skipping automatic FSDP defaults because cache-dit is enabled")
        return False
    if (
        args.performance_mode == "auto"
        and ctx.deployment.fsdp_auto_requires_default_parallelism
        and has_explicit_parallel_policy(args)
    ):
        ctx.log("Skipping automatic FSDP defaults because an explicit parallel policy is set")
        return False
    return not require_memory_headroom or _has_enough_memory_for_fsdp(args, ctx)


def enable_cfg_parallel_if_supported(args: ServerArgsState, ctx: TuneContext) -> None:
    """Turn CFG parallel on when the model allows it and nothing parallel is set."""
    if (
        ctx.deployment.auto_enable_cfg_parallel
        and args.enable_cfg_parallel is None
        and not has_explicit_parallel_policy(args)
        and ctx.pipeline.uses_cfg
    ):
        args.enable_cfg_parallel = True
        ctx.log(
            f"Enabling CFG parallel for {ctx.pipeline.config_class} alongside FSDP "
            "(model uses CFG by default, no parallel policy set): enable_cfg_parallel=True"
        )


def set_gpu_resident_defaults(args: ServerArgsState, ctx: TuneContext, *, use_fsdp: bool) -> None:
    """Keep every component on the GPU: unset flags become resident (``_set_gpu_resident_...``)."""
    changed: list[str] = []
    if args.use_fsdp_inference is None:
        args.use_fsdp_inference = use_fsdp
        changed.append(f"use_fsdp_inference={use_fsdp}")
    for flag in RESIDENT_FALSE_FLAGS:
        if getattr(args, flag) is None:
            setattr(args, flag, False)
            changed.append(f"{flag}=False")
    if changed:
        ctx.log(f"Applied GPU-resident performance defaults: {', '.join(changed)}")


def set_component_offload_defaults(args: ServerArgsState, ctx: TuneContext) -> None:
    """Non-CUDA memory mode: offload unset DiT/text/image components to CPU."""
    changed: list[str] = []
    for flag in COMPONENT_OFFLOAD_TRUE_FLAGS:
        if args.offload_flag(flag) is None:
            args.set_offload_flag(flag, True)
            changed.append(f"{flag}=True")
    if args.use_fsdp_inference is None:
        args.use_fsdp_inference = False
        changed.append("use_fsdp_inference=False")
    if changed:
        ctx.log(f"Applied low-memory component offload defaults: {', '.join(changed)}")


def set_layerwise_offload_defaults(args: ServerArgsState, ctx: TuneContext) -> None:
    """CUDA memory mode: default layerwise list, DiT on CPU, encoders resident when unset."""
    changed: list[str] = []
    if args.layerwise_offload_components is None:
        args.layerwise_offload_components = default_layerwise_components(args, ctx) or None
        changed.append(f"layerwise_offload_components={args.layerwise_offload_components}")
    defaults = ((DIT_FLAG, True), (TEXT_ENCODER_FLAG, False), (IMAGE_ENCODER_FLAG, False))
    for flag, value in defaults:
        if args.offload_flag(flag) is None:
            args.set_offload_flag(flag, value)
            changed.append(f"{flag}={value}")
    if changed:
        ctx.log(f"Applied layerwise offload defaults: {', '.join(changed)}")


def default_layerwise_components(args: ServerArgsState, ctx: TuneContext) -> list[str]:
    """Groups to offload layerwise when the user left placement unset.

    Mirrors ``_default_layerwise_components_for_unset_placement``: nothing for
    action models or when the user chose a layerwise policy; otherwise the aux
    groups whose ``*_cpu_offload`` was not given (True *or* False excludes),
    minus resident groups on high-memory GPUs (auto), plus the Wan DiT first
    when its predicate holds. May set the Wan2.2 A14B prefetch size.
    """
    if ctx.pipeline.is_action_gen:
        return []
    if ctx.is_explicit("layerwise_offload_components") or args.dit_layerwise_offload is True:
        return []
    components = [group for group, flag in AUX_GROUP_FLAGS if not ctx.is_explicit(flag)]
    components = _filter_high_memory_resident(args, ctx, components)
    if should_auto_enable_dit_layerwise(args, ctx):
        components.insert(0, DIT_GROUP)
        _set_default_wan_prefetch_size(args, ctx)
    return components


def _filter_high_memory_resident(args: ServerArgsState, ctx: TuneContext, components: list[str]) -> list[str]:
    if args.performance_mode != "auto" or ctx.is_cpu:
        return components
    min_available = ctx.min_available_gib(args)
    if min_available is None or min_available < keep_resident_threshold(ctx):
        return components
    resident = set(ctx.deployment.keep_resident_components)
    kept = [group for group in components if group not in resident]
    skipped = [group for group in components if group in resident]
    if skipped:
        ctx.log(
            f"Keeping default layerwise components resident for {ctx.pipeline.config_class} "
            f"because minimum available memory on selected GPUs is {min_available:.2f} GiB: "
            f"{', '.join(skipped)}"
        )
    return kept


def should_auto_enable_dit_layerwise(args: ServerArgsState, ctx: TuneContext) -> bool:
    """Wan DiT joins the default layerwise set (``_should_auto_enable_dit_layerwise_offload``).

    Memory mode: any Wan with the deployment opt-in and no guard hit. Auto
    mode: only Wan2.2 A14B, where coarse DiT CPU offload spikes step time.
    """
    if not ctx.pipeline.is_wan_family or not ctx.deployment.auto_dit_layerwise_offload:
        return False
    if (
        ctx.pipeline.dmd_denoising_steps_set
        or not ctx.enables_wan_dit_layerwise_by_default
        or ctx.cache_dit_enabled
        or args.use_fsdp_inference
        or ctx.is_explicit(DIT_FLAG)
    ):
        return False
    if args.performance_mode == "memory":
        return True
    return args.performance_mode == "auto" and ctx.pipeline.is_wan2_2_a14b


def _set_default_wan_prefetch_size(args: ServerArgsState, ctx: TuneContext) -> None:
    if (
        args.performance_mode == "auto"
        and ctx.pipeline.is_wan2_2_a14b
        and not ctx.is_explicit("dit_offload_prefetch_size")
    ):
        args.dit_offload_prefetch_size = WAN2_2_A14B_AUTO_PREFETCH_SIZE
        ctx.log(
            f"Setting dit_offload_prefetch_size={WAN2_2_A14B_AUTO_PREFETCH_SIZE:g} for "
            f"Wan2.2 A14B DiT layerwise offload in auto mode ({ctx.pipeline.config_class})"
        )


def auto_uses_dit_offload(args: ServerArgsState) -> bool:
    """The DiT is offloaded somehow: CPU offload, legacy layerwise, or the ``dit`` group."""
    return bool(
        args.dit_cpu_offload or args.dit_layerwise_offload or selects_dit(args.layerwise_offload_components)
    )


def uses_ltx23_high_memory_resident_mode(args: ServerArgsState, ctx: TuneContext) -> bool:
    """LTX-2.3 two-stage in ``resident`` mode on a CUDA device with >= 130 GiB total."""
    return (
        ctx.pipeline.is_ltx23_two_stage
        and args.ltx2_two_stage_device_mode == "resident"
        and ctx.is_cuda
        and ctx.total_memory_gib() >= LTX2_RESIDENT_AUTO_ENABLE_MEM_GB
    )
