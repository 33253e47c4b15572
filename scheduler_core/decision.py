"""``schedule()``: one request and a cluster snapshot in, one decision out.

Pure: no clock, no randomness, no network; the only I/O is reading a model's
``local_path`` folder. The same request gives a byte-identical result.
Nothing raises out of :func:`schedule`: bad input becomes ``status:
rejected`` with an error naming the field.
"""

from __future__ import annotations

import gc
import hashlib
import heapq
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from scheduler_core._render import ClaimMemo, candidate_out, estimate_out, event_out
from scheduler_core._schemas import ErrorOut, LaunchOut, ScheduleRequest, ScheduleResult, Worker
from scheduler_core.cluster import (
    ClusterState,
    SnapshotMemo,
    WorkerView,
    group_workers_by_gpu_type,
    sort_workers_by_gpu_count,
    worker_view,
)
from scheduler_core.diffusion_launch import explicit_diffusion_args, plan_diffusion_launch
from scheduler_core.errors import RequestError
from scheduler_core.estimate import (
    ModelFacts,
    estimate_vram,
    is_llm,
    model_ram_claim,
    resolve_model_facts,
)
from scheduler_core.events import list_message
from scheduler_core.filters import DEFAULT_FILTERS, WorkerFilter, run_filters
from scheduler_core.launch import launch_arguments
from scheduler_core.model_facts import (
    ModelConfigError,
    ModelFolderError,
    ModelParameters,
    model_parameters_from_config,
)
from scheduler_core.params import flatten_to_argv
from scheduler_core.scoring import pick_highest, score_candidates
from scheduler_core.sglang import (
    INIT_CONTEXT,
    SelectorOutcome,
    build_plan,
    fractions_by_type,
    run_strategies,
    validate_arguments,
)
from scheduler_core.strategies import DEFAULT_STRATEGIES
from scheduler_core.strategies._base import Candidate, Selection, Strategy

#: GPUStack's state-message header for an instance that could not be placed.
NO_SUITABLE_WORKERS = "No suitable workers.\nDetails:\n"
#: GPUStack's text when the selector produced no message of its own.
NO_RESOURCE_FIT = "No workers meet the resource requirements."


@dataclass(frozen=True, slots=True)
class Chain:
    """The plugin chain a decision runs: worker filters, then strategies in order.

    The default is GPUStack's chain; a deployment may drop or reorder plugins
    (``policy: gpustack`` parity holds only for the default).
    """

    filters: tuple[WorkerFilter, ...] = DEFAULT_FILTERS
    strategies: tuple[Strategy, ...] = DEFAULT_STRATEGIES
    #: Report at most this many candidates (None: all, GPUStack's behaviour). The
    #: selected one is always kept; the rest are the best-scoring, in selector order.
    max_candidates: int | None = None


#: GPUStack's chain.
DEFAULT_CHAIN = Chain()


def canonical_json(value: Any) -> str:
    """Sorted-key, compact JSON; the basis for digests and request ids."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _request_id(raw: Any) -> str:
    if isinstance(raw, ScheduleRequest):
        if raw.request_id:
            return raw.request_id
        raw = raw.model_dump(mode="json")
    if isinstance(raw, Mapping):
        given = raw.get("request_id")
        if isinstance(given, str) and 0 < len(given) <= 200:
            return given
    digest = hashlib.sha256(canonical_json(raw).encode()).hexdigest()[:24]
    return f"req-{digest}"


def _rejected(request_id: str, code: str, message: str, field: str | None) -> ScheduleResult:
    return ScheduleResult(
        request_id=request_id,
        status="rejected",
        error=ErrorOut(code=code, message=message, field=field),
    )


def _argument_rejection(
    error: RequestError, request_id: str, filter_messages: Sequence[str]
) -> ScheduleResult:
    """A rejection with the messages and state message GPUStack stores for the same error.

    ``find_candidate`` turns a selector-constructor error into its only message,
    stored under the no-suitable-workers header; an error raised while selecting
    propagates and is stored as ``Failed to find candidate: ...``
    (``gpustack/scheduler/scheduler.py: find_candidate``, ``_schedule_one``).
    """
    line = f"{error.context}: {error.message}"
    constructor = error.context == INIT_CONTEXT
    return ScheduleResult(
        request_id=request_id,
        status="rejected",
        messages=[line] if constructor else [],
        filter_messages=list(filter_messages),
        state_message=NO_SUITABLE_WORKERS + line if constructor else line,
        error=ErrorOut(code=error.code, message=error.message, field=error.field),
    )


def _validation_rejection(request_id: str, error: ValidationError) -> ScheduleResult:
    first = error.errors(include_url=False)[0]
    field = ".".join(str(part) for part in first["loc"]) or "request"
    message = str(first["msg"]).removeprefix("Value error, ")
    return _rejected(request_id, "invalid_request", message, field)


def schedule(
    request: ScheduleRequest | Mapping[str, Any] | Any,
    *,
    chain: Chain = DEFAULT_CHAIN,
    memo: SnapshotMemo | None = None,
) -> ScheduleResult:
    """Decide where the request's model runs (Contract 1).

    Args:
        request: a :class:`ScheduleRequest` or its JSON-shaped dict.
        chain: the filters and strategies to run (GPUStack's by default).
        memo: per-worker state reused across calls by a long-lived decider (see
            :class:`~scheduler_core.cluster.SnapshotMemo`); it never changes a result.

    Returns:
        ``scheduled`` with candidates, ``selected`` and launch arguments;
        ``unschedulable`` with GPUStack's messages when nothing fits now;
        ``rejected`` with an error naming the field for invalid input. Never raises.
    """
    request_id = _request_id(request)
    collecting = gc.isenabled()
    gc.disable()  # a decision allocates many short-lived objects; cyclic GC only slows it
    try:
        return _schedule(request, request_id, chain, memo)
    finally:
        if collecting:
            gc.enable()


def _schedule(request: Any, request_id: str, chain: Chain, memo: SnapshotMemo | None) -> ScheduleResult:
    try:
        parsed = request if isinstance(request, ScheduleRequest) else ScheduleRequest.model_validate(request)
    except ValidationError as error:
        return _validation_rejection(request_id, error)
    try:
        return _decide(parsed, request_id, chain, memo)
    except RequestError as error:
        if error.context is not None:
            return _argument_rejection(error, request_id, _filter_messages(parsed, chain, memo))
        return _rejected(request_id, error.code, error.message, error.field)
    except Exception as error:  # the contract is "never raises": report, don't crash
        return _rejected(request_id, "internal_error", f"{type(error).__name__}: {error}", None)


def _filter_messages(request: ScheduleRequest, chain: Chain, memo: SnapshotMemo | None) -> tuple[str, ...]:
    """The worker filters' lines for a request rejected on its arguments (GPUStack filters first)."""
    try:
        views = _snapshot(request, memo)
    except RequestError:
        return ()
    return run_filters(request.model, views, chain.filters).messages


def _snapshot(request: ScheduleRequest, memo: SnapshotMemo | None) -> list[WorkerView]:
    """The validated worker views (reused across decisions while the rows are the same objects)."""
    workers = request.workers
    if workers is None:
        raise RequestError("workers", "workers are required when no cluster state is held")
    if memo is None:
        return _validated_views(workers)
    return memo.derived("views", workers, lambda: _validated_views(workers))


def _validated_views(workers: Sequence[Worker]) -> list[WorkerView]:
    seen_ids: set[int] = set()
    seen_names: set[str] = set()
    for position, worker in enumerate(workers):
        if worker.id in seen_ids or worker.name in seen_names:
            raise RequestError(f"workers.{position}", f"duplicate worker {worker.name!r} (id {worker.id})")
        seen_ids.add(worker.id)
        seen_names.add(worker.name)
        _check_gpu_identity(worker, position)
    return [worker_view(worker) for worker in workers]


def _check_gpu_identity(worker: Worker, position: int) -> None:
    """A GPU is identified by (type, index) on its worker; two GPUs may not share one."""
    seen: set[tuple[str | None, int]] = set()
    devices = (worker.status.gpu_devices if worker.status else None) or ()
    for number, gpu in enumerate(devices):
        if gpu.index is None:
            continue
        if (gpu.type, gpu.index) in seen:
            raise RequestError(
                f"workers.{position}.status.gpu_devices.{number}",
                f"worker {worker.name!r} reports two {gpu.type} GPUs with index {gpu.index}",
            )
        seen.add((gpu.type, gpu.index))


def _model_facts(request: ScheduleRequest) -> tuple[ModelFacts, list[str], ModelParameters]:
    model = request.model
    try:
        facts = resolve_model_facts(model)
    except ModelFolderError as error:
        raise RequestError("model.local_path", str(error), "invalid_model_path") from None
    categories = list(model.categories) or (["image"] if facts.is_diffusers else [])
    omni = "image" in categories or "text_to_speech" in categories
    try:
        params = (
            ModelParameters()
            if omni
            else model_parameters_from_config(facts.hf_config, is_llm=is_llm(categories))
        )
    except ModelConfigError as error:
        raise RequestError(
            f"model.{error.field}",
            f"Failed to parse model {model.name} hyperparameters: {error.message}",
            "invalid_model_config",
            "Failed to find candidate",
        ) from None
    return facts, categories, params


def _decide(
    request: ScheduleRequest, request_id: str, chain_: Chain, memo: SnapshotMemo | None
) -> ScheduleResult:
    views = _snapshot(request, memo)
    model = request.model
    facts, categories, model_params = _model_facts(request)
    plan = build_plan(model, diffusion="image" in categories)
    user_fraction = validate_arguments(plan, model_params)
    diffusion_args = explicit_diffusion_args(model.backend_parameters) if "image" in categories else None
    chain = run_filters(model, views, chain_.filters)
    if not chain.workers:
        block = list_message(chain.messages) + "\n" if chain.messages else ""
        return ScheduleResult(
            request_id=request_id,
            status="unschedulable",
            messages=[block] if block else [],
            filter_messages=list(chain.messages),
            blocked_by=chain.blocked_by,
            state_message=NO_SUITABLE_WORKERS + block,
        )
    cluster = ClusterState(views, request.model_instances or (), memo)
    selection = Selection(
        model=model,
        categories=categories,
        model_params=model_params,
        cluster=cluster,
        vram_claim=estimate_vram(model, categories, facts),
        ram_claim=model_ram_claim(model),
        mfs_by_type={"*": 0.0},
        gpu_count=plan.gpu_count,
        manual=plan.manual,
        selected_workers=plan.selected_workers,
        check_vision_tp=plan.check_vision_tp,
    )
    # GPUStack computes fractions before sorting; order does not change a minimum.
    ordered = _ordered_workers(selection, chain.workers, memo)
    if not selection.is_diffusion:
        selection.mfs_by_type = fractions_by_type(plan, selection, ordered, user_fraction)
    outcome = run_strategies(selection, ordered, chain_.strategies)
    result = _result(request, request_id, selection, facts, chain.messages, outcome, chain_.max_candidates)
    if diffusion_args is None or result.selected is None:
        return result
    return _with_diffusion_plan(result, selection, facts, outcome.candidates[result.selected], diffusion_args)


def _ordered_workers(
    selection: Selection, workers: Sequence[WorkerView], memo: SnapshotMemo | None
) -> list[WorkerView]:
    """The filtered workers by GPU count, with their GPU-type grouping seeded in ``selection``.

    With a memo both are reused while the filter passes the same views, so the
    per-type worker copies keep their identity across decisions (which the
    strategies' cross-decision outcomes rely on).
    """
    if memo is None:
        return sort_workers_by_gpu_count(workers)

    def derive() -> tuple[list[WorkerView], dict[str | None, list[WorkerView]]]:
        ordered = sort_workers_by_gpu_count(workers)
        return ordered, group_workers_by_gpu_type(ordered)

    ordered, grouped = memo.derived("ordered", workers, derive)
    selection.seed_grouping(ordered, grouped)
    return ordered


def _shown_candidates(scores: Sequence[float], limit: int | None) -> list[int]:
    """Indexes of the candidates to report, in selector order.

    All of them without a ``limit``; otherwise the ``limit`` best-scoring
    (ties: earlier first), which always includes the chosen one (the first
    highest score ranks first).
    """
    if limit is None or len(scores) <= limit:
        return list(range(len(scores)))
    limit = max(limit, 1)
    # The limit-th highest score; every higher one is shown, then the earliest ties.
    cutoff = heapq.nlargest(limit, scores)[-1]
    above = [i for i, score in enumerate(scores) if score > cutoff]
    ties = [i for i, score in enumerate(scores) if score == cutoff][: limit - len(above)]
    return sorted(above + ties)


def _with_diffusion_plan(
    result: ScheduleResult,
    selection: Selection,
    facts: ModelFacts,
    chosen: Candidate,
    diffusion_args: dict[str, Any],
) -> ScheduleResult:
    """Add the diffusion auto-tuner's launch plan for the chosen GPUs (Contract 2 integration)."""
    plan = plan_diffusion_launch(selection.model, facts, chosen, selection.cluster, diffusion_args)
    if plan is None or result.launch is None:
        return result
    # SGLang diffusion sizes itself from --num-gpus and the tuned flags: the LLM launch
    # flags (--tp-size from the GPU count, --mem-fraction-static) do not apply.
    launch = LaunchOut.model_construct(
        backend_parameters=[*flatten_to_argv(selection.model.backend_parameters), *plan.cli_flags],
        nodes=None,
        diffusion=plan.summary,
    )
    events = [*result.events, *(event_out(e) for e in plan.events)]
    return result.model_copy(update={"launch": launch, "events": events})


def _result(
    request: ScheduleRequest,
    request_id: str,
    selection: Selection,
    facts: ModelFacts,
    filter_messages: Sequence[str],
    outcome: SelectorOutcome,
    max_candidates: int | None = None,
) -> ScheduleResult:
    model = request.model
    candidates = outcome.candidates
    scores = score_candidates(candidates, model.placement_strategy, selection.cluster, model.id)
    chosen = pick_highest(scores)
    shown = _shown_candidates(scores, max_candidates)
    claims: ClaimMemo = {}
    block = list_message(filter_messages) + "\n" if filter_messages else ""
    messages = list(outcome.messages)
    launch: LaunchOut | None = None
    state_message: str | None = None
    if chosen is None:
        messages = messages or [NO_RESOURCE_FIT]
        state_message = NO_SUITABLE_WORKERS + block + "".join(messages)
    else:
        launch = launch_arguments(model.backend_parameters, candidates[chosen])
        if not candidates[chosen].overcommit:
            messages = []  # GPUStack assembles messages only on failure or overcommit
    return ScheduleResult(
        request_id=request_id,
        status="scheduled" if chosen is not None else "unschedulable",
        candidates=[candidate_out(candidates[i], scores[i], claims) for i in shown],
        candidates_total=len(candidates),
        selected=None if chosen is None else shown.index(chosen),
        messages=messages,
        filter_messages=list(filter_messages),
        state_message=state_message,
        events=[event_out(e) for e in outcome.events],
        estimate=estimate_out(selection, facts),
        launch=launch,
    )
