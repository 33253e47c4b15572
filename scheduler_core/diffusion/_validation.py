"""Final validation (``_validate_offload``, ``_validate_parallelism``, ``_validate_cfg_parallel``).

Upstream: ``python/sglang/multimodal_gen/runtime/server_args/server_args.py``,
``ServerArgs._validate_parameters`` and the three methods above. The two cache-dit
conflict errors in ``validate_offload`` carry upstream's ``_validate_offload`` texts
exactly; the parallelism and CFG messages are ours and name the offending fields.
"""

from __future__ import annotations

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


def _dit_layerwise_selected(args: ServerArgsState) -> bool:
    return bool(args.dit_layerwise_offload) or selects_dit(args.layerwise_offload_components)


def validate_offload(args: ServerArgsState, ctx: TuneContext) -> None:
    """Resolve offload conflicts with cache-dit and FSDP.

    cache-dit + FSDP: error when FSDP was explicit, else FSDP is dropped.
    Layerwise DiT + FSDP: FSDP is dropped. Layerwise DiT + cache-dit: error.

    Raises:
        ValueError: on the two cache-dit conflicts above.
    """
    if ctx.cache_dit_enabled and args.use_fsdp_inference:
        if ctx.is_explicit("use_fsdp_inference"):
            raise ValueError(_CACHE_DIT_FSDP_ERROR)
        args.use_fsdp_inference = False
        ctx.log("cache-dit is enabled: use_fsdp_inference=False")
    if args.use_fsdp_inference and selects_dit(args.layerwise_offload_components):
        args.use_fsdp_inference = False
        ctx.log(
            f"layerwise_offload_components={args.layerwise_offload_components} offloads the "
            "DiT layerwise: use_fsdp_inference=False"
        )
    if ctx.cache_dit_enabled and _dit_layerwise_selected(args):
        raise ValueError(_CACHE_DIT_DIT_LAYERWISE_ERROR)


def validate_parallelism(args: ServerArgsState, ctx: TuneContext) -> None:
    """Check the GPU split (skipped on CPU).

    Raises:
        ValueError: when sp_degree does not divide num_gpus, num_gpus is not a
            multiple of dp*tp*cfg, sp_degree != ring*ulysses, or dp_size > 1.
    """
    if ctx.is_cpu:
        return
    num_gpus = args.num_gpus
    sp, tp = args.sp_degree or 1, args.tp_size or 1
    ulysses, ring = args.ulysses_degree or 1, args.ring_degree or 1
    cfg = (args.cfg_parallel_degree or 1) if args.enable_cfg_parallel else 1
    # texts below not given upstream in our notes
    if num_gpus % sp != 0:
        raise ValueError(f"num_gpus={num_gpus} must be divisible by sp_degree={sp}.")
    if num_gpus % (args.dp_size * tp * cfg) != 0:
        raise ValueError(
            f"num_gpus={num_gpus} must be divisible by dp_size*tp_size*cfg_parallel_degree "
            f"({args.dp_size}*{tp}*{cfg}={args.dp_size * tp * cfg})."
        )
    if sp != ring * ulysses:
        raise ValueError(
            f"sp_degree={sp} must equal ring_degree*ulysses_degree ({ring}*{ulysses}={ring * ulysses})."
        )
    if args.dp_size > 1:
        raise ValueError(f"dp_size={args.dp_size} is not supported; dp_size must be 1.")


def validate_cfg_parallel(args: ServerArgsState) -> None:
    """CFG parallel splits the two CFG branches over GPUs, so it needs at least two.

    Raises:
        ValueError: when CFG parallel is on with a single GPU.
    """
    if args.enable_cfg_parallel and args.num_gpus == 1:
        # text not given upstream in our notes
        raise ValueError("enable_cfg_parallel=True requires num_gpus >= 2 (got num_gpus=1).")
