"""GPUStack's SGLang selector constructor and argument checks, before any GPU is looked at.

``SGLangResourceFitSelector.__init__`` derives the GPU count from the backend
parameters and the manual selection (``_set_gpu_count``);
``_validate_and_set_arguments`` checks the flags against each other and the
model's hyperparameters. Texts and order are upstream's. An error of the
constructor and an error of the checks are stored differently by GPUStack
(:data:`INIT_CONTEXT`, :data:`FIND_CONTEXT`), so each carries its context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scheduler_core._schemas import ModelSpec
from scheduler_core.errors import RequestError
from scheduler_core.gpu_ids import parse_gpu_id, selected_worker_names
from scheduler_core.mem_fraction import ManualSelection
from scheduler_core.model_config import ModelParameters
from scheduler_core.params import BackendParameters, ParameterError
from scheduler_core.sglang_args import DP_NAMES, PP_NAMES, TP_NAMES

#: Env switch that lets a manual selection differ from the world size.
SKIP_GPU_COUNT_CHECK_ENV = "GPUSTACK_SKIP_GPU_COUNT_CHECK"
_TRUTHY_ENV = frozenset({"1", "true", "yes", "on"})

_PARAMS_FIELD = "model.backend_parameters"
#: GPUStack's prefix for an error of the selector's constructor (``scheduler.py: find_candidate``).
INIT_CONTEXT = "Failed to initialize SGLang candidates selector"
#: The rest of GPUStack's world-size mismatch error (``base_candidate_selector.py: _set_gpu_count``).
_MISMATCH_ADVICE = (
    "Adjust the selected GPUs or the parallelism backend parameters so they match. "
    "If the mismatch is intentional, add GPUSTACK_SKIP_GPU_COUNT_CHECK=1 to the model's "
    "environment variables to bypass this check and keep the selected gpu count."
)
#: GPUStack's prefix for an error raised while selecting (``scheduler.py: _schedule_one``).
FIND_CONTEXT = "Failed to find candidate"


@dataclass(frozen=True, slots=True)
class Plan:
    """What the selector derives from the model before looking at GPUs."""

    params: BackendParameters
    manual: ManualSelection
    selected_workers: tuple[str, ...]
    gpu_count: int | None
    check_vision_tp: bool


def _positive(value: int | None, flag: str) -> int | None:
    if value is not None and value <= 0:
        raise RequestError(
            _PARAMS_FIELD, f"--{flag} must be a positive integer.", "invalid_backend_parameters"
        )
    return value


#: Largest value of a size flag the placement arithmetic accepts. Larger values describe no
#: real deployment (the biggest clusters have tens of thousands of GPUs) and would overflow
#: the float arithmetic of the fraction calculator, which GPUStack then crashes on.
MAX_FLAG_VALUE = 1 << 20
#: The integer flags placement reads.
_SIZE_FLAGS = (
    *TP_NAMES,
    *PP_NAMES,
    *DP_NAMES,
    "nnodes",
    "num-gpus",
    "chunked-prefill-size",
    "cuda-graph-max-bs",
    "piecewise-cuda-graph-max-tokens",
)


def _check_sizes(params: BackendParameters) -> None:
    """Reject a size flag beyond :data:`MAX_FLAG_VALUE` (either sign), naming it."""
    for flag in _SIZE_FLAGS:
        value = params.find_int([flag])
        if value is not None and abs(value) > MAX_FLAG_VALUE:
            raise RequestError(
                _PARAMS_FIELD,
                f"--{flag} is out of range (at most {MAX_FLAG_VALUE}).",
                "invalid_backend_parameters",
            )


def world_size(params: BackendParameters) -> tuple[int | None, list[str]]:
    """``tp × pp × dp`` from the flags (dp ignored under ``--enable-dp-attention``)."""
    tp = _positive(params.find_int(TP_NAMES), TP_NAMES[0])
    pp = _positive(params.find_int(PP_NAMES), PP_NAMES[0])
    dp = _positive(params.find_int(DP_NAMES), DP_NAMES[0])
    if params.find_bool(["enable-dp-attention"]):
        dp = None  # DP attention reuses the TP group's GPUs
    size, strategies = 1, []
    for name, value in (("tp", tp), ("pp", pp), ("dp", dp)):
        if value:
            strategies.append(name)
            size *= value
    return (size, strategies) if strategies else (None, [])


def evaluated_gpus_per_replica(model: ModelSpec) -> int | None:
    """What GPUStack's model evaluation writes to an empty ``gpu_selector.gpus_per_replica``
    (``scheduler/scheduler.py: set_model_gpus_per_replica``); None when it writes nothing.

    A manual selection (``gpu_ids``) without a positive ``gpus_per_replica`` gets: the
    selected GPUs divided by the replicas under ``GPUSTACK_SKIP_GPU_COUNT_CHECK``; else the
    world size of the backend parameters (``get_world_size_from_backend_parameters``: the
    truthy ones of tp, pp and dp multiplied, dp left out under ``--enable-dp-attention``)
    when it is positive; else the largest power of two at most that share (0 below 1).
    """
    selector = model.gpu_selector
    if selector is None or not selector.gpu_ids or (selector.gpus_per_replica or 0) > 0:
        return None
    share = len(selector.gpu_ids) // max(model.replicas, 1)
    if _skip_gpu_count_check(model):
        return share
    params = BackendParameters(model.backend_parameters)
    sizes = [params.find_int(TP_NAMES), params.find_int(PP_NAMES)]
    if not params.find_bool(["enable-dp-attention"]):
        sizes.append(params.find_int(DP_NAMES))
    chosen = [size for size in sizes if size]  # GPUStack multiplies the truthy ones
    world = math.prod(chosen) if chosen else 0
    if world > 0:
        return world
    return 1 << (share.bit_length() - 1) if share >= 1 else 0


def _manual_selection(model: ModelSpec) -> tuple[ManualSelection, tuple[str, ...]]:
    """``utils/gpu.py: group_gpu_indexes_by_gpu_type_and_worker`` plus the selected workers."""
    selector = model.gpu_selector
    gpu_ids = (selector.gpu_ids if selector else None) or ()
    by_type: dict[str, dict[str, list[int]]] = {}
    seen: set[str] = set()
    for position, gpu_id in enumerate(gpu_ids):
        parsed = parse_gpu_id(gpu_id)
        field = f"model.gpu_selector.gpu_ids.{position}"
        if parsed is None:
            raise RequestError(field, f"Invalid GPU ID: {gpu_id}", "invalid_gpu_id", FIND_CONTEXT)
        if gpu_id in seen:
            raise RequestError(field, f"GPU id {gpu_id!r} is selected twice.")
        seen.add(gpu_id)
        by_type.setdefault(parsed.gpu_type, {}).setdefault(parsed.worker_name, []).append(parsed.index)
    frozen = {t: {w: sorted(ix) for w, ix in per.items()} for t, per in by_type.items()}
    manual = ManualSelection(
        by_type=frozen,
        gpus_per_replica=selector.gpus_per_replica if selector else None,
        active=selector is not None,
    )
    return manual, tuple(selected_worker_names(gpu_ids))


def _skip_gpu_count_check(model: ModelSpec) -> bool:
    value = (model.env or {}).get(SKIP_GPU_COUNT_CHECK_ENV, "")
    return bool(model.gpu_selector and model.gpu_selector.gpu_ids) and (value.strip().lower() in _TRUTHY_ENV)


def _diffusion_world_size(params: BackendParameters) -> tuple[int | None, list[str]]:
    """SGLang Diffusion's GPU count: ``--num-gpus`` when given, else tp × pp × dp.

    GPUStack ignores ``--num-gpus``, which places a ``--num-gpus 2`` model on one
    GPU; SGLang Diffusion then cannot start. gpusched sizes the placement by it.
    """
    num_gpus = _positive(params.find_int(["num-gpus"]), "num-gpus")
    return (num_gpus, ["num_gpus"]) if num_gpus else world_size(params)


def _gpu_count(model: ModelSpec, params: BackendParameters, selected: int, diffusion: bool) -> int | None:
    """GPUStack's ``_set_gpu_count``: manual count, else the world size."""
    selector = model.gpu_selector
    count = (selector.gpus_per_replica or selected) if selected and selector else None
    size, strategies = _diffusion_world_size(params) if diffusion else world_size(params)
    if not size:
        return count
    if count and count != size:
        if _skip_gpu_count_check(model):
            return count
        raise RequestError(
            _PARAMS_FIELD,
            f"Model {model.name} has {'/'.join(strategies)} set, but the selected gpu count "
            f"({count}) does not match the world size ({size}). {_MISMATCH_ADVICE}",
            "gpu_count_mismatch",
            INIT_CONTEXT,
        )
    return size


def build_plan(model: ModelSpec, *, diffusion: bool = False) -> Plan:
    """Everything derived from the model alone (GPUStack's selector constructor).

    ``diffusion`` (an IMAGE model) sizes the placement by ``--num-gpus`` when given.

    Raises:
        RequestError: malformed flags or GPU ids, or a GPU count that contradicts tp/pp/dp.
    """
    try:
        params = BackendParameters(model.backend_parameters)
    except ParameterError as error:  # GPUStack's constructor reads the flags first
        raise RequestError(error.field, str(error), "invalid_backend_parameters", INIT_CONTEXT) from None
    _check_sizes(params)
    manual, workers = _manual_selection(model)
    selected = sum(len(ix) for per in manual.by_type.values() for ix in per.values())
    count = _gpu_count(model, params, selected, diffusion)
    check_vision = not model.backend_parameters or not params.find_bool(["language-only"])
    return Plan(params, manual, workers, count, check_vision)


def _argument_error(message: str) -> RequestError:
    return RequestError(_PARAMS_FIELD, message, "invalid_backend_parameters", FIND_CONTEXT)


def _nnodes(params: BackendParameters) -> int:
    """GPUStack's ``_get_nnodes``: ``--nnodes`` or 1."""
    value = params.find(["nnodes"])
    if not value:
        return 1
    try:
        nnodes = int(value)
    except ValueError as error:  # GPUStack's int() fails with Python's own message
        raise _argument_error(str(error)) from None
    if nnodes <= 0:
        raise _argument_error("--nnodes must be a positive integer.")
    return nnodes


def _mixed_chunk(params: BackendParameters) -> bool:
    try:
        return params.find_strtobool(["enable-mixed-chunk"])
    except ParameterError as error:
        raise _argument_error(str(error)) from None


def _check_heads(tp: int, model_params: ModelParameters) -> None:
    heads = model_params.num_attention_heads
    if heads and heads % tp != 0:
        raise _argument_error(
            f"Total number of attention heads ({heads}) must be divisible by tp-size ({tp})."
        )


def _check_combinations(params: BackendParameters, pp: int, dp: int, mixed_chunk: bool) -> None:
    nnodes = _nnodes(params)
    speculative = params.find(["speculative-algorithm"])
    if pp > 1 and (speculative is not None or mixed_chunk):
        raise _argument_error(
            "Pipeline parallelism is not compatible with overlap schedule, speculative "
            "decoding, mixed chunked prefill."
        )
    if dp > 1 and nnodes != 1 and not params.find_bool(["enable-dp-attention"]):
        raise _argument_error("multi-node data parallel is not supported unless dp attention!")
    if speculative is not None and mixed_chunk:
        raise _argument_error("enable_mixed_chunk is required for speculative decoding")


def _user_fraction(params: BackendParameters) -> float:
    """``--mem-fraction-static`` (0 when absent). GPUStack fails on a value <= 0
    (an AttributeError deep in its calculator); gpusched rejects it up front."""
    try:
        value = params.find_float(["mem-fraction-static"])
    except ParameterError as error:
        raise _argument_error(str(error)) from None
    if value is not None and value <= 0:
        raise _argument_error("--mem-fraction-static must be greater than 0.")
    if value is not None and not math.isfinite(value):
        raise _argument_error("--mem-fraction-static must be a finite number.")
    return value or 0.0


def validate_arguments(plan: Plan, model_params: ModelParameters) -> float:
    """GPUStack's ``_validate_and_set_arguments``: same checks, order and texts.

    Returns:
        The user's ``--mem-fraction-static`` (0 when not set).

    Raises:
        RequestError: the flags contradict each other or the model.
    """
    params = plan.params
    tp = params.find_int(TP_NAMES) or 1
    _check_heads(tp, model_params)
    pp = params.find_int(PP_NAMES) or 1
    dp = params.find_int(DP_NAMES) or 1
    mixed_chunk = _mixed_chunk(params)
    nnodes = _nnodes(params)
    if (tp * pp) % nnodes != 0:
        raise _argument_error(f"tp-size {tp * pp} must be divisible by nnodes")
    _check_combinations(params, pp, dp, mixed_chunk)
    tp_problem = TpRule.of(model_params, plan.check_vision_tp).problem(tp)
    if tp_problem:
        raise _argument_error(tp_problem + " Consider adjusting your tp-size value.")
    return _user_fraction(params)


@dataclass(frozen=True, slots=True)
class TpRule:
    """GPUStack's ``_check_tp_size_divisibility`` for one model (hashable: a rule input).

    KV heads are not checked (upstream does not).
    """

    heads: int | None
    vision_heads: int | None
    check_vision: bool
    vocab_size: int | None

    @classmethod
    def of(cls, params: ModelParameters, check_vision: bool) -> TpRule:
        """The rule for a model's hyperparameters (``--language-only`` skips the vision check)."""
        return cls(
            params.num_attention_heads, params.vision_num_attention_heads, check_vision, params.vocab_size
        )

    def problem(self, tp: int | None) -> str | None:
        """The first failing check's text; None when ``tp`` is 0/None or everything divides."""
        if not tp:
            return None
        if self.heads and self.heads % tp != 0:
            return (
                f"Total number of attention heads ({self.heads}) must be divisible "
                f"by tensor parallel size ({tp})."
            )
        if self.check_vision and self.vision_heads and self.vision_heads % tp != 0:
            return (
                f"Total number of vision attention heads ({self.vision_heads}) must be divisible "
                f"by tensor parallel size ({tp})."
            )
        if self.vocab_size and self.vocab_size % tp != 0:
            return f"Vocabulary size ({self.vocab_size}) must be divisible by tensor parallel size ({tp})."
        return None

    def divisible(self, tp: int | None) -> bool:
        """GPUStack's ``_is_tp_size_divisible``: False for 0/None or any failing check."""
        return bool(tp) and self.problem(tp) is None
