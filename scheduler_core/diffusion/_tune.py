"""``tune()``: the whole diffusion ServerArgs defaulting flow in upstream order.

Steps are numbered in the call order of upstream ``server_args.py:
ServerArgs._adjust_parameters``. Step 2 (disaggregation aliases), step 6 (path,
quantization, CUDA-graph, warmup and port adjustments), the attention backend
of step 8 and the autocast / pipeline-config parts of step 10 touch nothing the
result exposes and are not ported:

1. the performance-mode step;
3. (not manual) ``_adjust_offload``, then the auto default layerwise step;
4. the LTX-2.3 two-stage device mode;
5. (not manual) residency, then auto-FSDP, then CPU -> layerwise replacement;
7. parallelism defaults; 8. platform-specific (MPS);
9. layerwise normalisation; 10. finalize; then validation.

The order is not commutative; the tests pin it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ._deployments import load_deployment_configs
from ._models import TuneRequest, TuneResult
from ._parallelism import adjust_parallelism
from ._policy import could_override_server_args
from ._resolve import resolve_deployment, resolve_pipeline
from ._server_steps import (
    adjust_layerwise_offload_components,
    adjust_ltx2_two_stage_device_mode,
    adjust_offload,
    adjust_platform_specific,
)
from ._state import ServerArgsState, TuneContext
from ._tuner import (
    adjust_based_on_performance_mode,
    finalize_auto_flags,
    maybe_adjust_auto_component_residency_after_offload,
    maybe_adjust_auto_default_layerwise_offload,
    maybe_adjust_auto_fsdp_with_offload_enabled,
    maybe_replace_cpu_offloaded_components_with_layerwise,
    normalize_performance_mode,
)
from ._validation import validate_cfg_parallel, validate_offload, validate_parallelism

Step = Callable[[ServerArgsState, TuneContext], None]


def _validate_cfg_parallel_step(args: ServerArgsState, _ctx: TuneContext) -> None:
    validate_cfg_parallel(args)


#: (step, runs in manual mode) in upstream order; see the module docstring.
FLOW: tuple[tuple[Step, bool], ...] = (
    (adjust_based_on_performance_mode, True),
    (adjust_offload, False),
    (maybe_adjust_auto_default_layerwise_offload, False),
    (adjust_ltx2_two_stage_device_mode, True),
    (maybe_adjust_auto_component_residency_after_offload, False),
    (maybe_adjust_auto_fsdp_with_offload_enabled, False),
    (maybe_replace_cpu_offloaded_components_with_layerwise, False),
    (adjust_parallelism, True),
    (adjust_platform_specific, True),
    (adjust_layerwise_offload_components, True),
    (finalize_auto_flags, True),
    (validate_offload, True),
    (validate_parallelism, True),
    (_validate_cfg_parallel_step, True),
)


def _build(request: TuneRequest, config_dir: Path | None) -> tuple[ServerArgsState, TuneContext]:
    mode = normalize_performance_mode(request.explicit_args.performance_mode)
    logs: list[str] = []
    catalog = load_deployment_configs(config_dir)
    deployment, entry = resolve_deployment(request, catalog, logs)
    pipeline = resolve_pipeline(request.pipeline, entry, logs)
    ctx = TuneContext(
        explicit=request.explicit_args.explicit_names(),
        platform=request.platform,
        cache_dit_enabled=request.env.cache_dit_enabled,
        ltx2_env_mode=request.env.SGLANG_LTX2_TWO_STAGE_DEVICE_MODE,
        pipeline=pipeline,
        deployment=deployment,
        logs=logs,
    )
    return ServerArgsState.from_input(request.explicit_args, mode), ctx


def _result(args: ServerArgsState, ctx: TuneContext) -> TuneResult:
    # Every None parallel knob was filled by adjust_parallelism; `or` keeps mypy honest.
    return TuneResult(
        performance_mode=args.performance_mode,
        enable_torch_compile=args.enable_torch_compile,
        use_fsdp_inference=args.use_fsdp_inference,
        dit_cpu_offload=args.dit_cpu_offload,
        dit_layerwise_offload=args.dit_layerwise_offload,
        layerwise_offload_components=args.layerwise_offload_components,
        text_encoder_cpu_offload=args.text_encoder_cpu_offload,
        image_encoder_cpu_offload=args.image_encoder_cpu_offload,
        vae_cpu_offload=args.vae_cpu_offload,
        dit_offload_prefetch_size=args.dit_offload_prefetch_size,
        enable_cfg_parallel=bool(args.enable_cfg_parallel),
        cfg_parallel_degree=args.cfg_parallel_degree or 1,
        tp_size=args.tp_size or 1,
        sp_degree=args.sp_degree or 1,
        ulysses_degree=args.ulysses_degree or 1,
        ring_degree=args.ring_degree or 1,
        ltx2_two_stage_device_mode=args.ltx2_two_stage_device_mode,
        num_gpus=args.num_gpus,
        explicit_args=sorted(ctx.explicit),
        logs=list(ctx.logs),
    )


def tune(request: TuneRequest | Mapping[str, Any], *, config_dir: Path | None = None) -> TuneResult:
    """Tune one diffusion deployment's ServerArgs (Contract 2).

    Args:
        request: a ``TuneRequest`` or its dict form.
        config_dir: folder with ``diffusion_deployments.json``; default ``configs/``.

    Returns:
        A frozen ``TuneResult``. Pure and deterministic: the same request gives a
        byte-identical ``model_dump_json()``.

    Raises:
        ValueError: invalid input (a ``pydantic.ValidationError`` naming the
            field, upstream's performance-mode text, a missing device memory
            entry) or an invalid final combination (validation step).
    """
    validated = request if isinstance(request, TuneRequest) else TuneRequest.model_validate(request)
    args, ctx = _build(validated, config_dir)
    for step, runs_in_manual in FLOW:
        if runs_in_manual or could_override_server_args(args):
            step(args, ctx)
    return _result(args, ctx)
