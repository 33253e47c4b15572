"""Launch planning for a scheduled IMAGE (diffusion) model: run the auto-tuner on the chosen GPUs.

The tuner sees what SGLang would see at start-up on the selected candidate:
``num_gpus`` = the candidate's GPU count, each device's free memory = its
allocatable VRAM before this placement (the tuner takes the minimum), the
device total = the smallest chosen GPU, the platform from the GPU type. The
performance mode comes from ``--performance-mode`` (default ``auto``) and
every diffusion flag in ``backend_parameters`` counts as explicitly set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from scheduler_core._schemas import ModelSpec
from scheduler_core._units import GIB
from scheduler_core.candidates import Candidate
from scheduler_core.cluster import ClusterState
from scheduler_core.diffusion import (
    PipelineInfo,
    TuneResult,
    diffusion_args_from_cli,
    pipeline_from_model_index,
    tune,
    tuned_cli_flags,
)
from scheduler_core.errors import RequestError
from scheduler_core.estimate import ModelFacts
from scheduler_core.events import Event, Level
from scheduler_core.params import flatten_to_argv

#: GPUStack GPU runtime type → SGLang platform kind (upstream predicates is_cuda, is_npu, ...).
PLATFORM_BY_GPU_TYPE = {"cuda": "cuda", "rocm": "rocm", "cann": "npu", "npu": "npu", "mps": "mps"}
#: Pipeline used when neither model_index.json nor the repo id identifies one:
#: SGLang's diffusers-generic config, as a text-to-image task (GPUStack's IMAGE category).
FALLBACK_PIPELINE = PipelineInfo(pipeline_config_class="DiffusersGenericPipelineConfig", task_type="T2I")
#: Event action for the tuner's decisions (gpusched's own; not a GPUStack action).
DIFFUSION_ACTION = "diffusion_launch_plan"
#: Model env keys the tuner reads (SGLang diffusion envs).
_ENV_KEYS = ("SGLANG_CACHE_DIT_ENABLED", "SGLANG_LTX2_TWO_STAGE_DEVICE_MODE")
#: SGLang's ``get_bool_env_var``: only "true" and "1" (any case) are true.
_TRUE_WORDS = frozenset({"1", "true"})
_FIELD = "model.backend_parameters"


@dataclass(frozen=True, slots=True)
class ExplicitArgs:
    """The diffusion flags the user set, by ServerArgs field name, or why SGLang's
    argument parser would refuse them (the placement does not depend on them)."""

    values: Mapping[str, Any]
    error: RequestError | None = None


def explicit_diffusion_args(backend_parameters: Sequence[str]) -> ExplicitArgs:
    """Read the diffusion flags as SGLang diffusion's argument parser would.

    A malformed flag does not reject the request: GPUStack places the model
    anyway (SGLang then refuses to start), so the refusal is reported with the
    launch plan instead.
    """
    try:
        return ExplicitArgs(diffusion_args_from_cli(flatten_to_argv(backend_parameters)))
    except ValueError as error:
        message = str(error).splitlines()[0]
        return ExplicitArgs({}, RequestError(_FIELD, message, "invalid_backend_parameters"))


@dataclass(frozen=True, slots=True)
class DiffusionPlan:
    """The tuned flags, the launch flags to append, and one event per tuner decision."""

    summary: dict[str, Any]
    cli_flags: list[str]
    events: tuple[Event, ...]


def _pipeline(model: ModelSpec, facts: ModelFacts) -> PipelineInfo:
    found = pipeline_from_model_index(facts.model_index, model.huggingface_repo_id)
    return found if found is not None else FALLBACK_PIPELINE


def _env(model: ModelSpec) -> dict[str, Any]:
    env = model.env or {}
    cache_dit = env.get(_ENV_KEYS[0], "")
    ltx2_mode = env.get(_ENV_KEYS[1]) or None
    return {_ENV_KEYS[0]: cache_dit.lower() in _TRUE_WORDS, _ENV_KEYS[1]: ltx2_mode}


def _platform(candidate: Candidate, cluster: ClusterState, kind: str) -> dict[str, Any]:
    free = cluster.allocatable(candidate.worker, candidate.gpu_type).vram
    chosen = [g for g in candidate.worker.gpus if g.index in candidate.gpu_indexes]
    by_index = {g.index: g for g in chosen}
    ordered = [by_index[i] for i in candidate.gpu_indexes if i in by_index]
    # Upstream reads the total and the name of the process's first device.
    return {
        "kind": kind,
        "device_total_memory_gib": ordered[0].total / GIB,
        "available_memory_gib_by_device": {
            str(device): free.get(gpu.index or 0, 0) / GIB for device, gpu in enumerate(ordered)
        },
        "device_name": ordered[0].name if ordered else None,
    }


def plan_diffusion_launch(
    model: ModelSpec,
    facts: ModelFacts,
    candidate: Candidate,
    cluster: ClusterState,
    explicit: ExplicitArgs,
) -> DiffusionPlan | None:
    """Tune the launch of ``candidate``; None when its GPU type has no SGLang platform.

    When the tuner refuses the user's diffusion settings for this placement
    (upstream's validation), the placement stands — GPUStack would deploy it —
    and the plan carries the error (``summary["error"]``) and an ERROR event,
    so the control plane learns before launch what SGLang will refuse.
    """
    kind = PLATFORM_BY_GPU_TYPE.get((candidate.gpu_type or "").lower())
    if kind is None or not candidate.gpu_indexes:
        return None
    pipeline = _pipeline(model, facts)
    if explicit.error is not None:
        return _refused(explicit.error, pipeline.pipeline_config_class)
    given = dict(explicit.values)
    given.setdefault("num_gpus", len(candidate.gpu_indexes))
    request = {
        "explicit_args": given,
        "platform": _platform(candidate, cluster, kind),
        "env": _env(model),
        "pipeline": pipeline.model_dump(),
    }
    pipeline_class = pipeline.pipeline_config_class
    try:
        result = tune(request)
    except ValidationError as error:
        return _refused(_validation_error(error), pipeline_class)
    except ValueError as error:
        refusal = RequestError(_FIELD, str(error).splitlines()[0], "invalid_diffusion_arguments")
        return _refused(refusal, pipeline_class)
    return _plan(result, set(explicit.values), pipeline_class)


def _refused(error: RequestError, pipeline_class: str) -> DiffusionPlan:
    summary = {
        "pipeline_config_class": pipeline_class,
        "error": {"code": error.code, "message": error.message, "field": error.field},
    }
    event = Event(Level.ERROR, DIFFUSION_ACTION, error.message, error.code)
    return DiffusionPlan(summary, [], (event,))


def _validation_error(error: ValidationError) -> RequestError:
    """A tuner input error, naming the model field it came from (flags or env)."""
    first = error.errors(include_url=False)[0]
    location = ".".join(str(part) for part in first["loc"])
    field = "model.env" if location.startswith("env") else _FIELD
    message = f"{location}: {str(first['msg']).removeprefix('Value error, ')}"
    return RequestError(field, message, "invalid_diffusion_arguments")


def _plan(result: TuneResult, explicit: set[str], pipeline_class: str) -> DiffusionPlan:
    flags = result.model_dump(exclude={"logs", "explicit_args"})
    cli = tuned_cli_flags(result, explicit | {"num_gpus"})
    if "num_gpus" not in explicit:
        cli = ["--num-gpus", str(result.num_gpus), *cli]
    summary = {
        "pipeline_config_class": pipeline_class,
        "performance_mode": result.performance_mode,
        "num_gpus": result.num_gpus,
        "flags": flags,
        "explicit_args": list(result.explicit_args),
        "logs": list(result.logs),
    }
    events = tuple(Event(Level.INFO, DIFFUSION_ACTION, line, "diffusion_tuning") for line in result.logs)
    return DiffusionPlan(summary, cli, events)
