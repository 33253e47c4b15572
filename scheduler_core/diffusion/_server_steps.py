"""ServerArgs defaulting steps around the tuner (upstream ``server_args.py: ServerArgs``).

``_adjust_offload`` (offload pre-defaults), ``_adjust_ltx2_two_stage_device_mode``,
``_adjust_platform_specific`` (MPS) and ``_adjust_layerwise_offload_components``
(normalisation). Parallelism and validation live in their own modules.
"""

from __future__ import annotations

from ._layerwise import (
    ALL_FLAGS,
    DIT_FLAG,
    IMAGE_ENCODER_FLAG,
    TEXT_ENCODER_FLAG,
    normalize_components,
    offload_flags_for,
    with_dit_prepended,
)
from ._policy import LTX2_RESIDENT_AUTO_ENABLE_MEM_GB
from ._state import ServerArgsState, TuneContext

#: ``ServerArgs._adjust_offload``: below this total device memory every component offloads.
LOW_DEVICE_MEMORY_TOTAL_GIB = 30.0

#: Device-name marker that selects the LTX-2.3 resident two-stage mode on CUDA, matched
#: against the upper-cased device name
#: (``ServerArgs._resolve_default_ltx2_two_stage_device_mode``).
LTX2_RESIDENT_DEVICE_NAME_MARKER = "H200"

#: Modes the LTX-2.3 step may leave in ``ltx2_two_stage_device_mode``
#: (upstream ``LTX2_TWO_STAGE_DEVICE_MODES``).
LTX2_DEVICE_MODES = ("original", "resident")

#: Values upstream accepts, listed in its error text (``LTX2_TWO_STAGE_DEVICE_MODE_CHOICES``).
LTX2_DEVICE_MODE_CHOICES = (*LTX2_DEVICE_MODES, "snapshot")

#: ``snapshot`` is a deprecated alias of ``original`` (``_normalize_ltx2_two_stage_device_mode``).
LTX2_MODE_ALIASES = {"snapshot": "original"}


def _offload_targets(ctx: TuneContext) -> tuple[dict[str, bool], str]:
    total = ctx.total_memory_gib()
    if total < LOW_DEVICE_MEMORY_TOTAL_GIB:
        reason = f"device total memory {total:.2f} GiB < {LOW_DEVICE_MEMORY_TOTAL_GIB:g} GiB"
        return {DIT_FLAG: True, TEXT_ENCODER_FLAG: True, IMAGE_ENCODER_FLAG: True}, reason
    if ctx.pipeline.is_image_gen:
        reason = f"image task {ctx.pipeline.task_type}"
        return {DIT_FLAG: True, TEXT_ENCODER_FLAG: True, IMAGE_ENCODER_FLAG: False}, reason
    reason = f"non-image task {ctx.pipeline.task_type}"
    return {DIT_FLAG: True, TEXT_ENCODER_FLAG: True, IMAGE_ENCODER_FLAG: True}, reason


def adjust_offload(args: ServerArgsState, ctx: TuneContext) -> None:
    """Offload pre-defaults by device memory and task (``_adjust_offload``, step 3a).

    Sets only flags that are still None: an explicit value, or one the
    performance-mode step already chose (memory mode's ``dit_cpu_offload=True``),
    is kept. Action (VLA) models default every still-unset ``*_cpu_offload``
    flag to False. No-op on CPU. ``vae_cpu_offload`` is never turned on here.
    """
    if ctx.is_cpu:
        return
    if ctx.pipeline.is_action_gen:
        # server_args.py: ServerArgs._adjust_offload fills the action defaults flag by flag
        # (`if ... is None`), like the other branches; it never overrides a set value.
        targets = dict.fromkeys(ALL_FLAGS, False)
        reason = f"action task {ctx.pipeline.task_type}"
    else:
        targets, reason = _offload_targets(ctx)
    changed: list[str] = []
    for flag, value in targets.items():
        if args.offload_flag(flag) is None:
            args.set_offload_flag(flag, value)
            changed.append(f"{flag}={value}")
    if changed:
        ctx.log(f"Offload pre-defaults ({reason}): {', '.join(changed)}")


def _default_ltx2_mode(ctx: TuneContext) -> tuple[str, str]:
    if not ctx.is_cuda:
        return "original", f"default on non-CUDA platform {ctx.platform.kind}"
    device_name = ctx.platform.device_name or ""
    # upstream upper-cases get_device_name(0) first, so "nvidia h200" counts too
    if LTX2_RESIDENT_DEVICE_NAME_MARKER in device_name.upper():
        return "resident", f"default: device name {device_name!r} contains 'H200'"
    total = ctx.total_memory_gib()
    if total >= LTX2_RESIDENT_AUTO_ENABLE_MEM_GB:
        limit = f"{LTX2_RESIDENT_AUTO_ENABLE_MEM_GB:g}"
        return "resident", f"default: device total memory {total:.2f} GiB >= {limit} GiB"
    limit = f"{LTX2_RESIDENT_AUTO_ENABLE_MEM_GB:g}"
    return "original", f"default: device total memory {total:.2f} GiB < {limit} GiB, not an H200"


def _chosen_ltx2_mode(args: ServerArgsState, ctx: TuneContext) -> tuple[str, str]:
    if args.ltx2_two_stage_device_mode is not None:
        return args.ltx2_two_stage_device_mode, "explicit ltx2_two_stage_device_mode"
    # upstream reads the env only when non-empty (`if env_mode`): "" counts as unset
    if ctx.ltx2_env_mode:
        return ctx.ltx2_env_mode, "env SGLANG_LTX2_TWO_STAGE_DEVICE_MODE"
    return _default_ltx2_mode(ctx)


def adjust_ltx2_two_stage_device_mode(args: ServerArgsState, ctx: TuneContext) -> None:
    """Pick the LTX-2.3 two-stage device mode: explicit, then env, then the default (step 4).

    Only for LTX-2.3 two-stage pipelines; other pipelines keep the given value
    untouched, whatever it is. The explicit or env value is lower-cased and
    ``snapshot`` becomes ``original``. Runs in every performance mode.

    Raises:
        ValueError: upstream's text, when the explicit or env value is not a mode.
    """
    if not ctx.pipeline.is_ltx23_two_stage:
        return
    chosen, source = _chosen_ltx2_mode(args, ctx)
    mode = chosen.lower()
    if mode in LTX2_MODE_ALIASES:
        source = f"{source}; {mode!r} is a deprecated alias of {LTX2_MODE_ALIASES[mode]!r}"
        mode = LTX2_MODE_ALIASES[mode]
    if mode not in LTX2_DEVICE_MODES:
        # server_args.py: ServerArgs._adjust_ltx2_two_stage_device_mode
        raise ValueError(
            f"Invalid ltx2_two_stage_device_mode={mode!r}. Expected one of {LTX2_DEVICE_MODE_CHOICES}."
        )
    args.ltx2_two_stage_device_mode = mode
    ctx.log(f"LTX-2.3 two-stage device mode: ltx2_two_stage_device_mode={mode} ({source})")


def adjust_platform_specific(args: ServerArgsState, ctx: TuneContext) -> None:
    """MPS keeps everything on the device: no FSDP, no layerwise, no CPU offload (step 8).

    Overrides explicit values too; no-op on other platforms.
    """
    if not ctx.is_mps:
        return
    args.use_fsdp_inference = False
    args.dit_layerwise_offload = False
    args.layerwise_offload_components = None
    for flag in ALL_FLAGS:
        args.set_offload_flag(flag, False)
    ctx.log(
        "MPS platform: use_fsdp_inference=False, dit_layerwise_offload=False, "
        "layerwise_offload_components=None, " + ", ".join(f"{flag}=False" for flag in ALL_FLAGS)
    )


def adjust_layerwise_offload_components(args: ServerArgsState, ctx: TuneContext) -> None:
    """Normalise the layerwise list and switch off the CPU offload it replaces (step 9).

    ``dit_layerwise_offload`` prepends ``dit`` unless the list already names
    that group. When the result names nothing, the value is left as it was
    (None stays None, an explicit ``[]`` stays ``[]``). Selected
    text/image-encoder and VAE groups get their ``*_cpu_offload`` set False;
    ``dit_cpu_offload`` is kept (it governs load-time residency).
    """
    raw = args.layerwise_offload_components
    components = normalize_components(raw)
    if args.dit_layerwise_offload:
        components = with_dit_prepended(components)
    if components is None:
        # server_args.py: ServerArgs._adjust_layerwise_offload_components assigns only a
        # normalised list that names something; otherwise the raw value stays.
        return
    if components != raw:
        ctx.log(f"Normalized layerwise_offload_components: {raw} -> {components}")
    args.layerwise_offload_components = components
    disabled: list[str] = []
    for component in components:
        for flag in offload_flags_for(component):
            if flag != DIT_FLAG and args.offload_flag(flag) is not False:
                args.set_offload_flag(flag, False)
                disabled.append(f"{flag}=False")
    if disabled:
        ctx.log(f"Layerwise offload of {components} replaces CPU offload: {', '.join(disabled)}")
