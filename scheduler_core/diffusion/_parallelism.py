"""Parallelism defaults, step 7 (upstream ``server_args.py: ServerArgs._adjust_parallelism``).

Order: tp, explicit CFG degree, auto CFG parallel, CFG degree default, sp,
then the ulysses/ring split. Validation is in ``_validation``.
"""

from __future__ import annotations

from ._state import ServerArgsState, TuneContext

#: CFG-parallel degree when CFG parallel is on and no degree was chosen (``_adjust_parallelism``).
DEFAULT_ENABLED_CFG_PARALLEL_DEGREE = 2


def _cfg_factor(args: ServerArgsState) -> int:
    """The CFG share of the GPU count: the degree when CFG parallel is on, else 1."""
    return (args.cfg_parallel_degree or 1) if args.enable_cfg_parallel else 1


def _default_tp(args: ServerArgsState, ctx: TuneContext) -> None:
    if args.tp_size is None:
        args.tp_size = 1
        ctx.log("Parallelism default: tp_size=1")
    if ctx.is_cpu and args.tp_size > 1 and args.num_gpus != args.tp_size:
        args.num_gpus = args.tp_size
        ctx.log(f"CPU platform with tp_size={args.tp_size}: num_gpus={args.num_gpus}")


def _apply_explicit_cfg_degree(args: ServerArgsState, ctx: TuneContext) -> None:
    degree = args.cfg_parallel_degree
    if degree is None:
        return
    args.enable_cfg_parallel = degree > 1
    ctx.log(f"cfg_parallel_degree={degree} sets enable_cfg_parallel={args.enable_cfg_parallel}")


def _auto_cfg_allowed(args: ServerArgsState, ctx: TuneContext, degree: int) -> bool:
    tp_size = args.tp_size or 1
    return (
        args.performance_mode != "manual"
        and ctx.deployment.auto_enable_cfg_parallel
        and args.num_gpus >= 2
        and args.num_gpus % (args.dp_size * tp_size * degree) == 0
        and args.sp_degree is None
        and args.ulysses_degree is None
        and args.ring_degree is None
        and ctx.pipeline.uses_cfg
    )


def _auto_cfg_parallel(args: ServerArgsState, ctx: TuneContext) -> None:
    if args.enable_cfg_parallel is not None:
        return
    degree = ctx.deployment.auto_cfg_parallel_degree(args.num_gpus)
    if degree >= 1 and _auto_cfg_allowed(args, ctx, degree):
        args.cfg_parallel_degree = degree
        args.enable_cfg_parallel = degree > 1
        ctx.log(
            f"Auto CFG parallel for {args.num_gpus} GPU(s): cfg_parallel_degree={degree}, "
            f"enable_cfg_parallel={args.enable_cfg_parallel}"
        )
        return
    args.enable_cfg_parallel = False
    ctx.log("Auto CFG parallel not applicable: enable_cfg_parallel=False")


def _default_cfg_degree(args: ServerArgsState, ctx: TuneContext) -> None:
    if args.cfg_parallel_degree is not None:
        return
    args.cfg_parallel_degree = DEFAULT_ENABLED_CFG_PARALLEL_DEGREE if args.enable_cfg_parallel else 1
    ctx.log(f"Parallelism default: cfg_parallel_degree={args.cfg_parallel_degree}")


def _default_sp(args: ServerArgsState, ctx: TuneContext) -> None:
    if args.sp_degree is None:
        divisor = args.dp_size * (args.tp_size or 1) * _cfg_factor(args)
        args.sp_degree = args.num_gpus // divisor if args.num_gpus % divisor == 0 else 1
        ctx.log(f"Parallelism default: sp_degree={args.sp_degree}")
    if args.ulysses_degree is None and args.ring_degree is None and args.sp_degree != 1:
        args.ulysses_degree = args.sp_degree
        ctx.log(f"Parallelism default: ulysses_degree={args.ulysses_degree} (= sp_degree)")
    for name in ("ulysses_degree", "ring_degree"):
        if getattr(args, name) is None:
            setattr(args, name, 1)
            ctx.log(f"Parallelism default: {name}=1")


def adjust_parallelism(args: ServerArgsState, ctx: TuneContext) -> None:
    """Fill tp/CFG/sp/ulysses/ring defaults (every mode, manual included).

    An explicit ``cfg_parallel_degree`` decides CFG parallel (1 off, >1 on).
    Otherwise non-manual modes turn it on for multi-GPU CFG models when the
    deployment allows, the GPU count divides, and no sp/ulysses/ring is set.
    Leftover GPUs go to sequence parallelism (all Ulysses by default).
    """
    _default_tp(args, ctx)
    _apply_explicit_cfg_degree(args, ctx)
    _auto_cfg_parallel(args, ctx)
    _default_cfg_degree(args, ctx)
    _default_sp(args, ctx)
