"""``schedule()``: one request and a cluster snapshot in, one decision out.

Pure: no clock, no randomness, no network; the only I/O is reading a model's
``local_path`` folder. The same request gives a byte-identical result.
Nothing raises out of :func:`schedule`: bad input becomes ``status:
rejected`` with an error naming the field.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from scheduler_core._schemas import (
    CandidateOut,
    ClaimOut,
    ErrorOut,
    EstimateOut,
    EventOut,
    LaunchOut,
    ScheduleRequest,
    ScheduleResult,
    SubordinateOut,
)
from scheduler_core.cluster import ClusterState, WorkerView, worker_view
from scheduler_core.errors import RequestError
from scheduler_core.estimate import (
    ModelFacts,
    estimate_vram,
    is_llm,
    model_ram_claim,
    resolve_model_facts,
)
from scheduler_core.events import Event, list_message
from scheduler_core.filters import run_filters
from scheduler_core.launch import launch_arguments
from scheduler_core.model_facts import (
    ModelConfigError,
    ModelFolderError,
    ModelParameters,
    model_parameters_from_config,
)
from scheduler_core.scoring import pick_highest, score_candidates
from scheduler_core.sglang import (
    SelectorOutcome,
    build_plan,
    fraction_summary,
    fractions_by_type,
    run_strategies,
    validate_arguments,
)
from scheduler_core.strategies._base import Candidate, Claim, Selection

#: GPUStack's state-message header for an instance that could not be placed.
NO_SUITABLE_WORKERS = "No suitable workers.\nDetails:\n"
#: GPUStack's text when the selector produced no message of its own.
NO_RESOURCE_FIT = "No workers meet the resource requirements."


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


def _validation_rejection(request_id: str, error: ValidationError) -> ScheduleResult:
    first = error.errors(include_url=False)[0]
    field = ".".join(str(part) for part in first["loc"]) or "request"
    message = str(first["msg"]).removeprefix("Value error, ")
    return _rejected(request_id, "invalid_request", message, field)


def schedule(request: ScheduleRequest | Mapping[str, Any] | Any) -> ScheduleResult:
    """Decide where the request's model runs (Contract 1).

    Args:
        request: a :class:`ScheduleRequest` or its JSON-shaped dict.

    Returns:
        ``scheduled`` with candidates, ``selected`` and launch arguments;
        ``unschedulable`` with GPUStack's messages when nothing fits now;
        ``rejected`` with an error naming the field for invalid input. Never raises.
    """
    request_id = _request_id(request)
    try:
        parsed = (
            request
            if isinstance(request, ScheduleRequest)
            else ScheduleRequest.model_validate(request)
        )
    except ValidationError as error:
        return _validation_rejection(request_id, error)
    try:
        return _decide(parsed, request_id)
    except RequestError as error:
        return _rejected(request_id, error.code, error.message, error.field)
    except Exception as error:  # the contract is "never raises": report, don't crash
        return _rejected(request_id, "internal_error", f"{type(error).__name__}: {error}", None)


def _snapshot(request: ScheduleRequest) -> list[WorkerView]:
    if request.workers is None:
        raise RequestError("workers", "workers are required when no cluster state is held")
    seen_ids: set[int] = set()
    seen_names: set[str] = set()
    for position, worker in enumerate(request.workers):
        if worker.id in seen_ids or worker.name in seen_names:
            raise RequestError(f"workers.{position}", f"duplicate worker {worker.name!r} (id {worker.id})")
        seen_ids.add(worker.id)
        seen_names.add(worker.name)
    return [worker_view(worker) for worker in request.workers]


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
            error.field,
            f"Failed to parse model {model.name} hyperparameters: {error}",
            "invalid_model_config",
        ) from None
    return facts, categories, params


def _decide(request: ScheduleRequest, request_id: str) -> ScheduleResult:
    views = _snapshot(request)
    model = request.model
    plan = build_plan(model)
    facts, categories, model_params = _model_facts(request)
    validate_arguments(plan, model_params)
    chain = run_filters(model, views)
    if not chain.workers:
        block = list_message(chain.messages) + "\n" if chain.messages else ""
        return ScheduleResult(
            request_id=request_id,
            status="unschedulable",
            messages=[block] if block else [],
            filter_messages=list(chain.messages),
            state_message=NO_SUITABLE_WORKERS + block,
        )
    cluster = ClusterState(views, request.model_instances or ())
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
    if not selection.is_diffusion:
        selection.mfs_by_type = fractions_by_type(plan, chain.workers, cluster, model_params)
    outcome = run_strategies(selection, chain.workers)
    return _result(request, request_id, selection, facts, chain.messages, outcome)


def _result(
    request: ScheduleRequest,
    request_id: str,
    selection: Selection,
    facts: ModelFacts,
    filter_messages: Sequence[str],
    outcome: SelectorOutcome,
) -> ScheduleResult:
    model = request.model
    scored = score_candidates(
        outcome.candidates, model.placement_strategy, selection.cluster, model.id
    )
    chosen = pick_highest(scored)
    block = list_message(filter_messages) + "\n" if filter_messages else ""
    messages = list(outcome.messages)
    launch: LaunchOut | None = None
    state_message: str | None = None
    if chosen is None:
        messages = messages or [NO_RESOURCE_FIT]
        state_message = NO_SUITABLE_WORKERS + block + "".join(messages)
    else:
        launch = launch_arguments(model.backend_parameters, scored[chosen])
        if not scored[chosen].overcommit:
            messages = []
    return ScheduleResult(
        request_id=request_id,
        status="scheduled" if chosen is not None else "unschedulable",
        candidates=[_candidate_out(c) for c in scored],
        selected=chosen,
        messages=messages,
        filter_messages=list(filter_messages),
        state_message=state_message,
        events=[_event_out(e) for e in outcome.events],
        estimate=_estimate_out(selection, facts),
        launch=launch,
    )


def _claim_out(claim: Claim) -> ClaimOut:
    return ClaimOut(
        vram={str(index): amount for index, amount in claim.vram.items()},
        ram=claim.ram,
        vram_utilization=claim.vram_utilization,
        estimated_vram=claim.estimated_vram,
    )


def _candidate_out(candidate: Candidate) -> CandidateOut:
    subordinates = [
        SubordinateOut(
            worker_id=sub.worker.id,
            worker_name=sub.worker.name,
            worker_ip=sub.worker.ip,
            worker_ifname=sub.worker.ifname,
            gpu_type=sub.gpu_type,
            gpu_indexes=list(sub.gpu_indexes),
            total_gpus=len(sub.gpu_indexes),
            computed_resource_claim=_claim_out(sub.claim),
        )
        for sub in candidate.subordinates
    ]
    return CandidateOut(
        worker_id=candidate.worker.id,
        worker_name=candidate.worker.name,
        worker_ip=candidate.worker.ip,
        gpu_type=candidate.gpu_type,
        gpu_indexes=list(candidate.gpu_indexes),
        computed_resource_claim=_claim_out(candidate.claim),
        overcommit=candidate.overcommit,
        score=candidate.score,
        subordinate_workers=subordinates or None,
    )


def _event_out(event: Event) -> EventOut:
    return EventOut(
        level=event.level.value, action=event.action, message=event.message, reason=event.reason
    )


def _estimate_out(selection: Selection, facts: ModelFacts) -> EstimateOut:
    return EstimateOut(
        vram_bytes=selection.vram_claim,
        ram_bytes=selection.ram_claim,
        mem_fraction_static=fraction_summary(selection.mfs_by_type),
        weight_bytes=facts.weight_bytes,
        weight_source=facts.weight_source,
    )
