"""Final validation (``_validate_offload``, ``_validate_parallelism``, ``_validate_cfg_parallel``).

Upstream: ``python/sglang/multimodal_gen/runtime/server_args/server_args.py``,
``ServerArgs._validate_parameters`` and the three methods above. Every check runs
in upstream's order under upstream's condition and raises upstream's text
character for character; the log lines for the values ``_validate_offload``
rewrites are upstream's log texts.

Not ported, because nothing here models them: the ``hsdp_replicate_dim`` and
``hsdp_shard_dim`` checks of ``_validate_parallelism`` (a request cannot set
either; upstream's defaults, 1 and ``num_gpus``, always pass), and the
advisory log lines that change no value (``_validate_offload``'s
prefetch-size recommendation and layerwise summary, ``_validate_parallelism``'s
cache-dit SP + TP warning).
"""

from __future__ import annotations

import math

from ._layerwise import selects_dit
from ._state import ServerArgsState, TuneContext

# Upstream's exact texts (server_args.py: ServerArgs._validate_offload), kept character
# for character so a refused request reads as SGLang itself would refuse it.
_CACHE_DIT_FSDP_ERROR = (
    "FSDP inference cannot be enabled together with cache-dit. "
    "cache-dit wraps known DiT block structures, while FSDP wraps "
    "and shards modules before cache-dit can inspect them. "
    "Please disable --use-fsdp-inference or disable "
    "SGLANG_CACHE_DIT_ENABLED."
)
_CACHE_DIT_DIT_LAYERWISE_ERROR = (
    "DiT layerwise offload cannot be enabled together with cache-dit. "
    "cache-dit may reuse skipped blocks whose weights have been released by layerwise offload, "
    "causing shape mismatch errors. "
    "Please disable --dit-layerwise-offload, remove DiT from --layerwise-offload-components, "
    "or disable SGLANG_CACHE_DIT_ENABLED."
)
_NEGATIVE_PREFETCH_ERROR = "dit_offload_prefetch_size must be non-negative"
_CACHE_DIT_FSDP_LOG = "cache-dit is enabled, automatically disabling use_fsdp_inference."
_DIT_LAYERWISE_FSDP_LOG = (
    "layerwise offload is selected for DiT components, automatically disabling use_fsdp_inference."
)

# Upstream's exact texts (server_args.py: ServerArgs._validate_parallelism).
_DP_SIZE_NOT_NATURAL_ERROR = "--dp-size must be a natural number"
_DP_NOT_SUPPORTED_ERROR = "DP is not yet supported"

# Upstream's exact text (server_args.py: ServerArgs._validate_cfg_parallel).
_CFG_PARALLEL_ONE_GPU_ERROR = "CFG Parallelism is enabled via `--enable-cfg-parallel`, but num_gpus == 1"


def _truncate_prefetch_size(args: ServerArgsState, ctx: TuneContext) -> None:
    """A fractional layer count above 1 is floored to whole layers (upstream logs it as invalid)."""
    size = args.dit_offload_prefetch_size
    # ``float()``: a strict float field still admits an int, which upstream leaves alone.
    if size > 1 and not float(size).is_integer():
        truncated = math.floor(size)
        args.dit_offload_prefetch_size = float(truncated)
        ctx.log(f"Invalid --dit-offload-prefetch-size value passed, truncated to: {truncated}")


def _validate_layerwise_offload(args: ServerArgsState, ctx: TuneContext) -> None:
    """The checks upstream runs only when a layerwise list is set (normalised by step 9)."""
    if not args.layerwise_offload_components:
        return
    if args.dit_offload_prefetch_size < 0.0:
        raise ValueError(_NEGATIVE_PREFETCH_ERROR)
    dit_selected = selects_dit(args.layerwise_offload_components)
    if args.use_fsdp_inference and dit_selected:
        args.use_fsdp_inference = False
        ctx.log(_DIT_LAYERWISE_FSDP_LOG)
    if ctx.cache_dit_enabled and dit_selected:
        raise ValueError(_CACHE_DIT_DIT_LAYERWISE_ERROR)


def validate_offload(args: ServerArgsState, ctx: TuneContext) -> None:
    """Floor the prefetch size, then resolve offload conflicts with cache-dit and FSDP.

    A non-integer ``dit_offload_prefetch_size`` above 1 is floored (logged).
    cache-dit + FSDP: error when FSDP was explicit, else FSDP is dropped (logged).
    With a layerwise list: a negative prefetch size is an error; a list that
    selects the DiT drops FSDP (logged) and, with cache-dit, is an error.

    Raises:
        ValueError: upstream's text, on the negative prefetch size and the two
            cache-dit conflicts above.
    """
    _truncate_prefetch_size(args, ctx)
    if ctx.cache_dit_enabled and args.use_fsdp_inference:
        if ctx.is_explicit("use_fsdp_inference"):
            raise ValueError(_CACHE_DIT_FSDP_ERROR)
        args.use_fsdp_inference = False
        ctx.log(_CACHE_DIT_FSDP_LOG)
    _validate_layerwise_offload(args, ctx)


def _check_sp_degree(num_gpus: int, sp_degree: int) -> None:
    if sp_degree > num_gpus or num_gpus % sp_degree != 0:
        raise ValueError(f"num_gpus ({num_gpus}) must be >= and divisible by sp_degree ({sp_degree})")


def _check_dp_size(num_gpus: int, dp_size: int) -> None:
    # Upstream divides before testing dp_size < 1; ServerArgsInput already refuses
    # dp_size < 1, so only a hand-built state reaches the natural-number check.
    if num_gpus % dp_size != 0:
        raise ValueError(f"num_gpus ({num_gpus}) must be divisible by dp_size ({dp_size})")
    if dp_size < 1:
        raise ValueError(_DP_SIZE_NOT_NATURAL_ERROR)
    if dp_size > 1:
        raise ValueError(_DP_NOT_SUPPORTED_ERROR)


def _check_gpu_groups(args: ServerArgsState) -> None:
    cfg_degree = args.cfg_parallel_degree or 1
    group = args.dp_size * (args.tp_size or 1)
    if args.enable_cfg_parallel:
        group *= cfg_degree
    if args.num_gpus % group != 0:
        # Upstream names the CFG factor by its value, and only when CFG parallel is on.
        cfg_factor = f" * {cfg_degree}" if args.enable_cfg_parallel else ""
        raise ValueError(
            f"num_gpus ({args.num_gpus}) must be divisible by (dp_size * tp_size{cfg_factor}) = {group}"
        )


def _check_sequence_split(sp_degree: int, ring_degree: int, ulysses_degree: int) -> None:
    if sp_degree != ring_degree * ulysses_degree:
        raise ValueError(
            f"sp_degree ({sp_degree}) must equal ring_degree * ulysses_degree "
            f"({ring_degree} * {ulysses_degree} = {ring_degree * ulysses_degree})"
        )


def validate_parallelism(args: ServerArgsState, ctx: TuneContext) -> None:
    """Check the GPU split (skipped on CPU), in upstream's order.

    Raises:
        ValueError: upstream's text, on the first failing check of: sp_degree
            above or not dividing num_gpus; dp_size not dividing num_gpus;
            dp_size < 1; dp_size > 1; num_gpus not a multiple of dp*tp(*cfg
            degree when CFG parallel is on); sp_degree != ring*ulysses.
    """
    if ctx.is_cpu:
        return
    _check_sp_degree(args.num_gpus, args.sp_degree or 1)
    _check_dp_size(args.num_gpus, args.dp_size)
    _check_gpu_groups(args)
    _check_sequence_split(args.sp_degree or 1, args.ring_degree or 1, args.ulysses_degree or 1)


def validate_cfg_parallel(args: ServerArgsState) -> None:
    """CFG parallel splits the CFG branches over GPUs, so it needs more than one.

    Raises:
        ValueError: upstream's text, when CFG parallel is on with a single GPU.
    """
    if args.enable_cfg_parallel and args.num_gpus == 1:
        raise ValueError(_CFG_PARALLEL_ONE_GPU_ERROR)
