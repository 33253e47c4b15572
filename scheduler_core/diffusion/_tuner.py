"""The ``ServerArgsAutoTuner`` steps (upstream ``auto_tune.py``), one function each.

``tune()`` calls them in upstream order, interleaved with the ServerArgs
defaulting steps of ``_server_steps``; the order is not commutative.
"""

from __future__ import annotations

from ._layerwise import (
    AUX_GROUP_FLAGS,
    DIT_FLAG,
    DIT_GROUP,
    IMAGE_ENCODER_FLAG,
    IMAGE_ENCODER_GROUP,
    TEXT_ENCODER_FLAG,
    TEXT_ENCODER_GROUP,
    VAE_FLAG,
    VAE_GROUP,
)
from ._policy import (
    auto_uses_dit_offload,
    can_apply_fsdp_policy,
    could_override_server_args,
    default_layerwise_components,
    enable_cfg_parallel_if_supported,
    keep_resident_threshold,
    set_component_offload_defaults,
    set_gpu_resident_defaults,
    set_layerwise_offload_defaults,
    uses_ltx23_high_memory_resident_mode,
)
from ._state import ServerArgsState, TuneContext

#: Upstream ``PERFORMANCE_MODES``, in upstream's order (it appears in the error text).
PERFORMANCE_MODES = ("manual", "auto", "speed", "memory")

#: Residency pass: (flag, group) pairs checked against ``keep_resident_components``.
RESIDENCY_FLAG_GROUPS = (
    (DIT_FLAG, DIT_GROUP),
    (TEXT_ENCODER_FLAG, TEXT_ENCODER_GROUP),
    (IMAGE_ENCODER_FLAG, IMAGE_ENCODER_GROUP),
    (VAE_FLAG, VAE_GROUP),
)

#: Flags finalize turns from None to False (``finalize_auto_flags``; vae is never None).
FINALIZED_FLAGS = (
    "use_fsdp_inference",
    DIT_FLAG,
    "dit_layerwise_offload",
    TEXT_ENCODER_FLAG,
    IMAGE_ENCODER_FLAG,
)


def normalize_performance_mode(performance_mode: str | None) -> str:
    """Lower-case the mode; None or empty means ``auto``.

    Raises:
        ValueError: upstream's text when the mode is not one of ``PERFORMANCE_MODES``.
    """
    mode = (performance_mode or "auto").lower()
    if mode not in PERFORMANCE_MODES:
        raise ValueError(
            f"Invalid performance_mode={performance_mode!r}. Expected one of {PERFORMANCE_MODES}."
        )
    return mode


def adjust_based_on_performance_mode(args: ServerArgsState, ctx: TuneContext) -> None:
    """Step 1: apply the speed/memory mode defaults (nothing on CPU, auto or manual)."""
    if ctx.is_cpu:
        ctx.log(f"performance_mode={args.performance_mode}: CPU platform, no mode defaults")
        return
    if args.performance_mode == "speed":
        _apply_speed_mode(args, ctx)
    elif args.performance_mode == "memory":
        _apply_memory_mode(args, ctx)
    elif args.performance_mode == "auto":
        ctx.log("performance_mode=auto: no mode defaults; the auto steps below decide")
    else:
        ctx.log("performance_mode=manual: the tuner fills no memory flags")


def _apply_speed_mode(args: ServerArgsState, ctx: TuneContext) -> None:
    ctx.log("Applying performance_mode=speed")
    if not args.enable_torch_compile and not ctx.is_explicit("enable_torch_compile"):
        # Speed means fastest, so compile by default; an explicit false still wins.
        args.enable_torch_compile = True
        ctx.log("performance_mode=speed enables torch.compile (pass --enable-torch-compile false to opt out)")
    if args.num_gpus >= 2 and can_apply_fsdp_policy(args, ctx, require_memory_headroom=False):
        set_gpu_resident_defaults(args, ctx, use_fsdp=True)
        enable_cfg_parallel_if_supported(args, ctx)
    else:
        set_gpu_resident_defaults(args, ctx, use_fsdp=False)


def _apply_memory_mode(args: ServerArgsState, ctx: TuneContext) -> None:
    ctx.log("Applying performance_mode=memory")
    if args.use_fsdp_inference:
        set_gpu_resident_defaults(args, ctx, use_fsdp=True)
        if args.layerwise_offload_components is None and ctx.is_cuda:
            args.layerwise_offload_components = default_layerwise_components(args, ctx) or None
            ctx.log(
                "performance_mode=memory with FSDP selected layerwise offload components: "
                f"{args.layerwise_offload_components}"
            )
        return
    args.use_fsdp_inference = False
    if ctx.is_cuda:
        set_layerwise_offload_defaults(args, ctx)
    else:
        set_component_offload_defaults(args, ctx)


def maybe_adjust_auto_default_layerwise_offload(args: ServerArgsState, ctx: TuneContext) -> None:
    """Step 3b: auto mode on CUDA picks the verified default layerwise groups."""
    if args.performance_mode != "auto" or not could_override_server_args(args):
        return
    if args.layerwise_offload_components is not None or args.dit_layerwise_offload is True:
        return
    if not ctx.is_cuda:
        return
    components = default_layerwise_components(args, ctx)
    if not components:
        return
    ctx.log(
        f"Auto memory policy for {ctx.pipeline.config_class} selected layerwise offload "
        f"components: {', '.join(components)}"
    )
    args.layerwise_offload_components = components


def maybe_adjust_auto_component_residency_after_offload(args: ServerArgsState, ctx: TuneContext) -> None:
    """Step 5a: on high-memory GPUs bring the model's resident groups back to the GPU.

    Skipped unless auto mode, no explicit memory policy, and not CPU. Ends
    with the LTX-2.3 resident two-stage pass.
    """
    if args.performance_mode != "auto" or ctx.explicit_memory_policy or ctx.is_cpu:
        return
    min_available = ctx.min_available_gib(args)
    if min_available is not None and min_available >= keep_resident_threshold(ctx):
        changed = _drop_resident_groups(args, ctx)
        if changed:
            ctx.log(
                f"Disabling component offload for {ctx.pipeline.config_class} because minimum "
                f"available memory on selected GPUs is {min_available:.2f} GiB: "
                f"{', '.join(changed)}"
            )
    _keep_ltx23_aux_components_resident(args, ctx)


def _drop_resident_groups(args: ServerArgsState, ctx: TuneContext) -> list[str]:
    resident = ctx.deployment.keep_resident_components
    changed: list[str] = []
    current = args.layerwise_offload_components
    if current is not None and not ctx.is_explicit("layerwise_offload_components"):
        kept = [name for name in current if name not in resident]
        if kept != current:
            args.layerwise_offload_components = kept or None
            changed.append(f"layerwise_offload_components={args.layerwise_offload_components}")
    for flag, group in RESIDENCY_FLAG_GROUPS:
        if args.offload_flag(flag) and group in resident and not ctx.is_explicit(flag):
            args.set_offload_flag(flag, False)
            changed.append(f"{flag}=False")
    return changed


def _keep_ltx23_aux_components_resident(args: ServerArgsState, ctx: TuneContext) -> None:
    if not uses_ltx23_high_memory_resident_mode(args, ctx):
        return
    changed: list[str] = []
    if args.layerwise_offload_components is not None and not ctx.is_explicit("layerwise_offload_components"):
        args.layerwise_offload_components = None
        changed.append("layerwise_offload_components=None")
    # Both DiTs stay on the GPU in resident mode; unset aux placement follows them.
    for _group, flag in AUX_GROUP_FLAGS:
        if args.offload_flag(flag) and not ctx.is_explicit(flag):
            args.set_offload_flag(flag, False)
            changed.append(f"{flag}=False")
    if changed:
        ctx.log(f"Keeping LTX2 high-memory two-stage auxiliary components resident: {', '.join(changed)}")


def maybe_adjust_auto_fsdp_with_offload_enabled(args: ServerArgsState, ctx: TuneContext) -> None:
    """Step 5b: multi-GPU auto mode swaps DiT offload for FSDP where the model allows."""
    if (
        args.performance_mode == "auto"
        and args.num_gpus >= 2
        and not ctx.explicit_memory_policy
        and auto_uses_dit_offload(args)
        and can_apply_fsdp_policy(args, ctx, require_memory_headroom=True)
    ):
        ctx.log(
            "Automatically selecting FSDP defaults for multi-GPU "
            f"{ctx.pipeline.config_class} to replace DiT offload"
        )
        args.use_fsdp_inference = True
        if args.dit_cpu_offload:
            args.dit_cpu_offload = False
        if args.dit_layerwise_offload:
            args.dit_layerwise_offload = False
        enable_cfg_parallel_if_supported(args, ctx)


def _replacement_blocked(args: ServerArgsState, ctx: TuneContext) -> bool:
    return (
        not could_override_server_args(args)
        or ctx.explicit_layerwise_replacement_policy
        or ctx.is_cpu
        or not ctx.is_cuda
        or ctx.cache_dit_enabled
        or bool(args.use_fsdp_inference)
        or args.layerwise_offload_components is not None
    )


def maybe_replace_cpu_offloaded_components_with_layerwise(args: ServerArgsState, ctx: TuneContext) -> None:
    """Step 5c: on CUDA, components still CPU-offloaded by default go layerwise instead.

    The ``*_cpu_offload`` flags are left as they are here; the normalisation
    step turns the selected ones off.
    """
    if _replacement_blocked(args, ctx):
        return
    components = [DIT_GROUP] if args.dit_layerwise_offload else []
    changed: list[str] = []
    for group, flag in AUX_GROUP_FLAGS:
        if args.offload_flag(flag) and not ctx.is_explicit(flag):
            components.append(group)
            changed.append(group)
    if not changed:
        return
    args.layerwise_offload_components = components
    ctx.log(
        f"Automatically replacing CPU offload with layerwise offload for components: {', '.join(changed)}"
    )


def finalize_auto_flags(args: ServerArgsState, ctx: TuneContext) -> None:
    """Step 10: flags still unset become False (not in manual mode, where they stay None)."""
    if not could_override_server_args(args):
        return
    finalized = [flag for flag in FINALIZED_FLAGS if getattr(args, flag) is None]
    for flag in finalized:
        setattr(args, flag, False)
    if finalized:
        ctx.log(f"Finalized unset flags to False: {', '.join(finalized)}")
