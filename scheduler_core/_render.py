"""Rendering a decision as the Contract 1 result: candidates, messages, launch, errors.

The internal objects are already well-typed, so the result models are built
with ``model_construct`` (no re-validation): a 2,000-worker cluster can yield
16,000 single-GPU candidates, and validating each would dominate the decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

from scheduler_core._schemas import (
    CandidateOut,
    ClaimOut,
    ErrorOut,
    EstimateOut,
    EventOut,
    FailureOut,
    LaunchOut,
    ScheduleResult,
    SubordinateOut,
    WorkerRefOut,
)
from scheduler_core.arguments import INIT_CONTEXT
from scheduler_core.candidates import Candidate, Claim, Subordinate
from scheduler_core.diffusion_launch import ExplicitArgs, plan_diffusion_launch
from scheduler_core.errors import RequestError
from scheduler_core.estimate import ModelFacts, vram_claim_override
from scheduler_core.events import Event, list_message
from scheduler_core.framework import SelectorOutcome
from scheduler_core.launch import launch_arguments
from scheduler_core.limits import render_text
from scheduler_core.messages import (
    NO_AVAILABLE_WORKERS,
    NO_RESOURCE_FIT,
    NO_SUITABLE_WORKERS,
    UNKNOWN_WEIGHT_SIZE,
)
from scheduler_core.outcomes import ReasonFailures
from scheduler_core.params import flatten_to_argv
from scheduler_core.ranking import Ranking
from scheduler_core.reasons import Reason
from scheduler_core.selection import Selection

_M = TypeVar("_M", bound=BaseModel)


def _construct(cls: type[_M], **fields: Any) -> _M:
    """``cls.model_construct(**fields)`` for callers that pass *every* field.

    Same object state as pydantic's ``model_construct`` (field dict, fields-set,
    no extra, no private), without its per-call default/alias handling, which
    costs ~3 µs per object; ``tests/engine/test_render.py`` pins the equivalence.
    """
    return _built(cls, fields, _fields_set(cls))


def _built(cls: type[_M], fields: dict[str, Any], fields_set: set[str]) -> _M:
    """:func:`_construct` on a ready field dict and ``cls``'s fields-set (the per-candidate path)."""
    instance: _M = _new_object(cls)
    _set(instance, "__dict__", fields)
    # Every field is passed, so the fields-set is the class's; one shared set per class
    # (pydantic copies it before changing it: model_copy and __copy__ take a copy).
    # BaseModel's slots, set through their descriptors (no attribute lookup by name).
    _set_fields_set(instance, fields_set)
    _set_extra(instance, None)
    _set_private(instance, None)
    return instance


_new_object: Any = object.__new__
_set = object.__setattr__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__
_FIELDS_SETS: dict[type[BaseModel], set[str]] = {}


def _fields_set(cls: type[BaseModel]) -> set[str]:
    known = _FIELDS_SETS.get(cls)
    if known is None:
        known = _FIELDS_SETS[cls] = set(cls.model_fields)
    return known


_CANDIDATE_FIELDS = _fields_set(CandidateOut)

#: Memo of rendered claims keyed by their content.
ClaimMemo = dict[tuple[object, ...], ClaimOut]


def claim_out(claim: Claim, memo: ClaimMemo | None = None) -> ClaimOut:
    """A claim with GPU indexes as string keys (JSON object keys).

    Equal claims (the same GPU size and index on many workers) share one
    immutable output object when a ``memo`` is passed.
    """
    if memo is not None:
        key = (tuple(claim.vram.items()), claim.ram, claim.vram_utilization, claim.estimated_vram)
        shared = memo.get(key)
        if shared is None:
            shared = memo[key] = claim_out(claim)
        return shared
    return _construct(
        ClaimOut,
        vram={str(index): amount for index, amount in claim.vram.items()},
        ram=claim.ram,
        vram_utilization=claim.vram_utilization,
        estimated_vram=claim.estimated_vram,
    )


def _subordinate_out(sub: Subordinate) -> SubordinateOut:
    return _construct(
        SubordinateOut,
        worker_id=sub.worker.id,
        worker_name=sub.worker.name,
        worker_ip=sub.worker.ip,
        worker_ifname=sub.worker.ifname,
        gpu_type=sub.gpu_type,
        gpu_indexes=list(sub.gpu_indexes),
        total_gpus=len(sub.gpu_indexes),
        computed_resource_claim=claim_out(sub.claim),
    )


def candidates_out(
    candidates: Sequence[Candidate], ranking: Ranking, shown: Sequence[int]
) -> list[CandidateOut]:
    """The shown candidates (positions into ``candidates``) with their placement scores.

    Equal claims share one immutable output object. The per-candidate path of a decision
    (thousands for a one-GPU model, as GPUStack lists them): one loop that builds each
    candidate's field dict in the model's field order, with the class's fields-set, and
    looks its claim up by the claim object's identity first (strategies share one
    ``Claim`` between equal candidates; the objects outlive this call).
    """
    claims: ClaimMemo = {}
    by_claim: dict[int, ClaimOut] = {}
    rendered: list[CandidateOut] = []
    append = rendered.append
    for position in shown:
        worker, gpu_type, indexes, claim, overcommit, subordinates, kv_tokens = candidates[position]
        claimed = by_claim.get(id(claim))
        if claimed is None:
            claimed = by_claim[id(claim)] = claim_out(claim, claims)
        fields = {
            "worker_id": worker.id,
            "worker_name": worker.name,
            "worker_ip": worker.ip,
            "gpu_type": gpu_type,
            "gpu_indexes": list(indexes),
            "computed_resource_claim": claimed,
            "overcommit": overcommit,
            "score": ranking.score(position),
            "subordinate_workers": [_subordinate_out(sub) for sub in subordinates] if subordinates else None,
            "kv_tokens": kv_tokens,
        }
        append(_built(CandidateOut, fields, _CANDIDATE_FIELDS))
    return rendered


def event_out(event: Event) -> EventOut:
    """A recorded event."""
    reason = None if event.reason is None else str(event.reason)
    return EventOut.model_construct(
        level=event.level.value, action=event.action, message=event.message, reason=reason
    )


def fraction_summary(fractions: Mapping[str | None, float]) -> dict[str, float]:
    """Fractions keyed by real GPU types only (drops ``"*"`` and the GPU-less ``None``)."""
    return {t: f for t, f in fractions.items() if t is not None and t != "*"}


def estimate_out(selection: Selection, facts: ModelFacts) -> EstimateOut:
    """What the model needs, as decided for this request."""
    return EstimateOut.model_construct(
        vram_bytes=selection.vram_claim,
        ram_bytes=selection.ram_claim,
        mem_fraction_static=fraction_summary(selection.mfs_by_type),
        weight_bytes=facts.weight_bytes,
        weight_source=facts.weight_source,
    )


# --------------------------------------------------------------------------- results


def rejected(request_id: str, code: str, message: str, field: str | None) -> ScheduleResult:
    """Bad input: nothing placed, the error names the field."""
    return ScheduleResult(
        request_id=request_id,
        status="rejected",
        error=ErrorOut(code=code, message=message, field=field),
    )


def argument_rejection(
    error: RequestError, request_id: str, filter_messages: Sequence[str]
) -> ScheduleResult:
    """A rejection with the messages and state message GPUStack stores for the same error.

    ``find_candidate`` turns a selector-constructor error into its only message,
    stored under the no-suitable-workers header; an error raised while selecting
    propagates and is stored as ``Failed to find candidate: ...``
    (``gpustack/scheduler/scheduler.py: find_candidate``, ``_schedule_one``).
    """
    line = f"{error.context}: {render_text(error.message)}"
    constructor = error.context == INIT_CONTEXT
    return ScheduleResult(
        request_id=request_id,
        status="rejected",
        messages=[line] if constructor else [],
        filter_messages=list(filter_messages),
        state_message=NO_SUITABLE_WORKERS + line if constructor else line,
        error=ErrorOut(code=error.code, message=error.message, field=error.field),
    )


def no_workers(request_id: str) -> ScheduleResult:
    """An empty cluster: GPUStack does not even look for a candidate
    (``scheduler/scheduler.py: _schedule_one``)."""
    return ScheduleResult(request_id=request_id, status="unschedulable", state_message=NO_AVAILABLE_WORKERS)


def blocked(request_id: str, filter_messages: Sequence[str], reason: Reason | None) -> ScheduleResult:
    """No worker passed the filters: GPUStack's filter block is the whole message."""
    block = list_message(filter_messages) + "\n" if filter_messages else ""
    return ScheduleResult(
        request_id=request_id,
        status="unschedulable",
        messages=[block] if block else [],
        filter_messages=list(filter_messages),
        blocked_by=None if reason is None else reason.value,
        state_message=NO_SUITABLE_WORKERS + block,
    )


def decision(
    request_id: str,
    selection: Selection,
    facts: ModelFacts,
    filter_messages: Sequence[str],
    outcome: SelectorOutcome,
    ranking: Ranking,
    chosen: int | None,
    max_candidates: int | None = None,
) -> ScheduleResult:
    """A scheduled or unschedulable result with GPUStack's messages (``ranking``: the scores
    of ``outcome``'s candidates, ``chosen`` its pick)."""
    candidates = outcome.candidates
    shown = ranking.shown(max_candidates, chosen)
    block = list_message(filter_messages) + "\n" if filter_messages else ""
    messages = list(outcome.messages)
    launch: LaunchOut | None = None
    state_message: str | None = None
    if chosen is None:
        messages = messages or [NO_RESOURCE_FIT]
        state_message = NO_SUITABLE_WORKERS + block + "".join(messages)
    else:
        launch = launch_arguments(selection.model.backend_parameters, candidates[chosen])
        if not candidates[chosen].overcommit:
            messages = []  # GPUStack assembles messages only on failure or overcommit
    warnings = estimate_warnings(selection, facts)
    return ScheduleResult(
        request_id=request_id,
        status="scheduled" if chosen is not None else "unschedulable",
        candidates=candidates_out(candidates, ranking, shown),
        candidates_total=len(candidates),
        selected=None if chosen is None else shown.index(chosen),
        messages=messages,
        filter_messages=list(filter_messages),
        state_message=state_message,
        events=[*(_warning_event(text) for text in warnings), *(event_out(e) for e in outcome.events)],
        warnings=warnings,
        estimate=estimate_out(selection, facts),
        launch=launch,
        failures=failures_out(outcome.failures),
    )


def failures_out(failures: Sequence[ReasonFailures]) -> list[FailureOut] | None:
    """The stages' failures per reason (None when there are none: the field is left out)."""
    if not failures:
        return None
    return [
        _construct(
            FailureOut,
            stage=failure.stage,
            reason=failure.reason.value,
            workers=failure.workers,
            examples=[_construct(WorkerRefOut, id=ref_id, name=name) for ref_id, name in failure.examples],
        )
        for failure in failures
    ]


#: Event action of gpusched's warnings about the estimate (not a GPUStack action).
ESTIMATE_WARNING_ACTION = "estimate_warning"


def estimate_warnings(selection: Selection, facts: ModelFacts) -> list[str]:
    """Warnings about the estimate: a weight size that had to be guessed (no VRAM override)."""
    if facts.weight_source != "unknown" or vram_claim_override(selection.model) is not None:
        return []
    return [UNKNOWN_WEIGHT_SIZE]


def _warning_event(text: str) -> EventOut:
    return EventOut.model_construct(
        level="warning", action=ESTIMATE_WARNING_ACTION, message=text, reason="weight_size_unknown"
    )


def with_diffusion_plan(
    result: ScheduleResult,
    selection: Selection,
    facts: ModelFacts,
    chosen: Candidate,
    diffusion_args: ExplicitArgs,
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


def with_policy(result: ScheduleResult, policy: str, candidate_fraction: bool) -> ScheduleResult:
    """The result as decided under ``policy``; with ``candidate_fraction``, the estimate's
    fraction is the chosen candidate's own (a policy with no fraction per GPU type, such as
    ``precise``), none for an unscheduled result."""
    update: dict[str, Any] = {"policy": policy}
    if candidate_fraction and result.estimate is not None:
        fractions: dict[str, float] = {}
        if result.selected is not None:
            chosen = result.candidates[result.selected]
            fraction = chosen.computed_resource_claim.vram_utilization
            if chosen.gpu_type is not None and fraction is not None:
                fractions[chosen.gpu_type] = fraction
        update["estimate"] = result.estimate.model_copy(update={"mem_fraction_static": fractions})
    return result.model_copy(update=update)
