"""``schedule()``: one request and a cluster snapshot in, one decision out.

The orchestrator of a decision, in named phases:

1. **parse** the request (:func:`scheduler_core.validation.parse_request`: its depth rule,
   then pydantic; wrong types rejected with the field);
2. **prepare**: worker views, the model's facts and hyperparameters, GPUStack's
   selector constructor and argument checks (:mod:`scheduler_core.arguments`);
3. **filter** the workers (:mod:`scheduler_core.filters`);
4. **generate**: the cluster view, the fraction per GPU type, a complete
   :class:`~scheduler_core.selection.Selection`, then the strategies in order;
5. **score** the candidates and pick the first highest;
6. **render** the result (:mod:`scheduler_core._render`), with the diffusion
   launch plan for an IMAGE model.

Pure: no clock, no randomness, no network; the only I/O is reading a model's
``local_path`` folder. The same request gives a byte-identical result.
Nothing raises out of :func:`schedule`: bad input becomes ``status:
rejected`` with an error naming the field. Reuse across decisions lives in
:mod:`scheduler_core.caching` and is passed in as a ``memo``.
"""

from __future__ import annotations

import hashlib
import json
import operator
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from scheduler_core import _render
from scheduler_core._schemas import ModelInstance, ModelSpec, ScheduleRequest, ScheduleResult, Worker
from scheduler_core.arguments import FIND_CONTEXT, Plan, TpRule, build_plan, validate_arguments
from scheduler_core.caching import StageRunner
from scheduler_core.candidates import Candidate
from scheduler_core.cluster import ClusterState, group_workers_by_gpu_type, sort_workers_by_gpu_count
from scheduler_core.cycle import CycleState, DecisionInputs
from scheduler_core.diffusion_launch import ExplicitArgs, explicit_diffusion_args
from scheduler_core.errors import RequestError
from scheduler_core.estimate import ModelFacts, estimate_vram, is_llm, model_ram_claim, resolve_model_facts
from scheduler_core.framework import (
    Chain,
    FilterChainOutcome,
    Policy,
    Scorer,
    WorkerFilter,
    run_filters,
    run_strategies,
)
from scheduler_core.hooks import deciding
from scheduler_core.limits import NOT_UNICODE, encodable, flat_canonical_json, too_deep
from scheduler_core.mem_fraction import FractionFlags, FractionInputs, MemFractionCalculator
from scheduler_core.memo import SlotKey, SnapshotMemo
from scheduler_core.model_config import ModelConfigError, ModelParameters, model_parameters_from_config
from scheduler_core.model_folder import ModelFolderError
from scheduler_core.plugins import chain_for, policy_of, scorer_of
from scheduler_core.ranking import ListRanking, Ranking
from scheduler_core.selection import Selection
from scheduler_core.validation import parse_request
from scheduler_core.workers import DuplicateGpu, InvalidText, WorkerView, checked_views, worker_view

_T = TypeVar("_T")

#: Longest client-given request id used as is; longer or missing ids are derived.
MAX_REQUEST_ID = 200
#: The id of a rejection for a request that has no id and cannot be hashed into one: only a
#: Python value that contains itself (JSON cannot express one); nesting never prevents a digest.
UNHASHABLE_REQUEST_ID = "req-unhashable"


def canonical_json(value: Any) -> str:
    """Sorted-key, compact JSON; the basis for digests and request ids."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def request_id_for(raw: Any) -> str:
    """The request's id: its own ``request_id`` (1–200 characters of valid Unicode), else
    ``req-`` and 24 hex digits of the sha256 of its canonical JSON (the same request, the
    same id). Any depth is hashed: a request too deep for :func:`canonical_json` is written
    by :func:`~scheduler_core.limits.flat_canonical_json`, which gives the same text.

    Raises:
        RequestError: the request has no usable id and contains itself (no JSON text).
    """
    if isinstance(raw, ScheduleRequest):
        if raw.request_id:
            return raw.request_id
        raw = raw.model_dump(mode="json")
    if isinstance(raw, Mapping):
        given = raw.get("request_id")
        if isinstance(given, str) and 0 < len(given) <= MAX_REQUEST_ID and encodable(given):
            return given
    try:
        text = flat_canonical_json(raw) if too_deep(raw) else canonical_json(raw)
    except ValueError:  # json's "Circular reference detected"
        raise RequestError("request", "contains itself (a circular reference)") from None
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    return f"req-{digest}"


@dataclass(frozen=True, slots=True)
class Decided:
    """A decision, and the facts its strategies prepared for it (what their wake answers read).

    Attributes:
        result: exactly what :func:`schedule` returns for the same arguments.
        state: the decision's :class:`~scheduler_core.cycle.CycleState`; None when no
            strategy ran (a rejection, no workers, every worker filtered out).
    """

    result: ScheduleResult
    state: CycleState | None = None


def schedule(
    request: ScheduleRequest | Mapping[str, Any] | Any,
    *,
    chain: Chain | None = None,
    memo: SnapshotMemo | None = None,
) -> ScheduleResult:
    """Decide where the request's model runs (Contract 1).

    Args:
        request: a :class:`ScheduleRequest` or its JSON-shaped dict.
        chain: the filters, strategies and scorer to run; None runs the chain of the
            request's ``policy``, and a chain of another policy lends only its filters,
            candidate cap and settings (:func:`scheduler_core.plugins.chain_for`).
        memo: state reused across calls by a long-lived decider (see
            :class:`~scheduler_core.memo.SnapshotMemo`); it never changes a result.

    Returns:
        ``scheduled`` with candidates, ``selected`` and launch arguments;
        ``unschedulable`` with GPUStack's messages when nothing fits now;
        ``rejected`` with an error naming the field for invalid input. Never raises.
        Decides with the cyclic garbage collector paused and leaves it as it found it
        (:func:`scheduler_core.hooks.deciding`, which a long-lived caller also wraps
        around its own work between decisions).
    """
    return decide(request, chain=chain, memo=memo).result


def decide(
    request: ScheduleRequest | Mapping[str, Any] | Any,
    *,
    chain: Chain | None = None,
    memo: SnapshotMemo | None = None,
) -> Decided:
    """:func:`schedule`, with the facts the strategies prepared (for a parked request's wake
    floor, :func:`scheduler_core.hooks.wake_floor`). Never raises; the result is the same bytes.

    The cyclic garbage collector is paused while it decides and restored after
    (:func:`~scheduler_core.hooks.deciding`): a decision builds thousands of short-lived
    objects and no reference cycle, so the collector's passes over them (a third of a cold
    decision at 1,000 workers) find nothing; reference counting frees them all.
    """
    with deciding():
        try:
            request_id = request_id_for(request)
        except RequestError as error:
            return Decided(_render.rejected(UNHASHABLE_REQUEST_ID, error.code, error.message, error.field))
        return _schedule(request, request_id, chain, memo)


def _schedule(
    request: Any, request_id: str, configured: Chain | None, memo: SnapshotMemo | None
) -> Decided:
    try:
        parsed = parse_request(request)
    except RequestError as error:
        return Decided(_render.rejected(request_id, error.code, error.message, error.field))
    chain = chain_for(parsed.policy, configured)
    policy = policy_of(chain)
    decided = _decided(parsed, request_id, chain, policy, memo)
    result = decided.result
    if policy.name == result.policy and not policy.candidate_fraction:
        return decided
    return Decided(_render.with_policy(result, policy.name, policy.candidate_fraction), decided.state)


def _decided(
    parsed: ScheduleRequest, request_id: str, chain: Chain, policy: Policy, memo: SnapshotMemo | None
) -> Decided:
    try:
        return _decide(parsed, request_id, chain, policy, memo)
    except RequestError as error:
        if error.context is not None:
            messages = _filter_messages(parsed, chain, memo)
            return Decided(_render.argument_rejection(error, request_id, messages))
        return Decided(_render.rejected(request_id, error.code, error.message, error.field))
    except Exception as error:  # the contract is "never raises": report, don't crash
        text = f"{type(error).__name__}: {error}"
        return Decided(_render.rejected(request_id, "internal_error", text, None))


# --------------------------------------------------------------------------- prepare


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a decision derives from the request before looking at GPUs."""

    views: tuple[WorkerView, ...]
    facts: ModelFacts
    categories: list[str]
    model_params: ModelParameters
    plan: Plan
    user_fraction: float
    diffusion_args: ExplicitArgs | None


def _prepare(request: ScheduleRequest, memo: SnapshotMemo | None) -> Prepared:
    """Phase 2. Raises RequestError for anything that makes the request invalid."""
    _check_text(request, memo)
    views = _views(request, memo)
    model = request.model
    facts, categories, model_params = _model_facts(request)
    plan = build_plan(model, diffusion="image" in categories)
    user_fraction = validate_arguments(plan, model_params)
    diffusion_args = explicit_diffusion_args(model.backend_parameters) if "image" in categories else None
    return Prepared(views, facts, categories, model_params, plan, user_fraction, diffusion_args)


#: What a decision keeps in a memo: the validated views, the ordering and grouping of the
#: filtered workers, the filters' outcomes, the fraction calculator's inputs per GPU type, the checked
#: instance names.
VIEWS, ORDERED, FILTERED = SlotKey("views"), SlotKey("ordered"), SlotKey("filtered")
#: Filter outcomes kept per set of views (one per distinct cluster, GPU and label selector).
FILTERED_KEPT = 64
FRACTION_INPUTS, INSTANCE_NAMES = SlotKey("fraction_inputs"), SlotKey("instance_names")


def _reused(
    memo: SnapshotMemo | None, slot: SlotKey, items: Sequence[object], compute: Callable[[], _T]
) -> _T:
    return compute() if memo is None else memo.derived(slot, items, compute)


def _views(request: ScheduleRequest, memo: SnapshotMemo | None) -> tuple[WorkerView, ...]:
    """The validated worker views (reused while the rows are the same objects; a tuple, so
    the memo's later checks of the same views are one identity test each)."""
    workers = request.workers
    if workers is None:
        raise RequestError("workers", "workers are required when no cluster state is held")
    return _reused(memo, VIEWS, workers, lambda: tuple(_validated_views(workers, memo)))


def _validated_views(workers: Sequence[Worker], memo: SnapshotMemo | None) -> list[WorkerView]:
    if memo is None:  # a cold decision: every row checked at once, row by row only on a failure
        checked = checked_views(workers)
        if checked is not None:
            return checked
    seen_ids: set[int] = set()
    seen_names: set[str] = set()
    views: list[WorkerView] = []
    for position, worker in enumerate(workers):
        if worker.id in seen_ids or worker.name in seen_names:
            raise RequestError(f"workers.{position}", f"duplicate worker {worker.name!r} (id {worker.id})")
        seen_ids.add(worker.id)
        seen_names.add(worker.name)
        try:
            views.append(worker_view(worker) if memo is None else memo.view_of(worker, worker_view))
        except DuplicateGpu as error:
            raise RequestError(f"workers.{position}.status.gpu_devices.{error.number}", str(error)) from None
        except InvalidText as error:
            raise RequestError(f"workers.{position}.{error.where}", str(error)) from None
    return views


def _check_text(request: ScheduleRequest, memo: SnapshotMemo | None) -> None:
    """The model's and instances' strings a result can carry must be valid Unicode."""
    model = request.model
    named: list[tuple[str, str | None]] = [
        ("request_id", request.request_id),
        ("model.name", model.name),
        ("model.local_path", model.local_path),
    ]
    named += [(f"model.backend_parameters.{i}", p) for i, p in enumerate(model.backend_parameters)]
    gpu_ids = model.gpu_selector.gpu_ids if model.gpu_selector else None
    named += [(f"model.gpu_selector.gpu_ids.{i}", g) for i, g in enumerate(gpu_ids or ())]
    for field, text in named:
        if text is not None and not encodable(text):
            raise RequestError(field, _SURROGATE)
    instances = request.model_instances or ()
    # Thousands of instances, mostly the same objects decision after decision: with a memo,
    # only the ones appended since the last check are read.
    failed = (
        _first_bad_name(instances) if memo is None
        else memo.first_failure(INSTANCE_NAMES, instances, _name_encodable)
    )
    if failed is not None:
        raise RequestError(f"model_instances.{failed}.name", _SURROGATE)


_SURROGATE = NOT_UNICODE
_INSTANCE_NAME = operator.attrgetter("name")


def _name_encodable(instance: ModelInstance) -> bool:
    return instance.name is None or encodable(instance.name)


def _first_bad_name(instances: Sequence[ModelInstance]) -> int | None:
    if "".join(filter(None, map(_INSTANCE_NAME, instances))).isascii():  # the common case, at C speed
        return None
    for position, instance in enumerate(instances):
        if not _name_encodable(instance):
            return position
    return None


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
            else model_parameters_from_config(
                facts.hf_config, is_llm=is_llm(categories), typed=facts.typed_config
            )
        )
    except ModelConfigError as error:
        raise RequestError(
            f"model.{error.field}",
            f"Failed to parse model {model.name} hyperparameters: {error.message}",
            "invalid_model_config",
            FIND_CONTEXT,
        ) from None
    return facts, categories, params


def _filter_messages(request: ScheduleRequest, chain: Chain, memo: SnapshotMemo | None) -> tuple[str, ...]:
    """The worker filters' lines for a request rejected on its arguments (GPUStack filters first)."""
    try:
        views = _views(request, memo)
    except RequestError:
        return ()
    return run_filters(request.model, views, chain.filters).messages


# --------------------------------------------------------------------------- decide


def _decide(
    request: ScheduleRequest, request_id: str, chain: Chain, policy: Policy, memo: SnapshotMemo | None
) -> Decided:
    prepared = _prepare(request, memo)
    if policy.leaves_out_replaced:
        _check_replaces(request)
    if not prepared.views:
        return Decided(_render.no_workers(request_id))
    model = request.model
    filtered = _filtered(model, prepared.views, chain.filters, memo)
    if not filtered.workers:
        return Decided(_render.blocked(request_id, filtered.messages, filtered.blocked_by))
    selection = _selection(request, prepared, filtered.workers, memo, chain, policy)
    outcome = run_strategies(selection, chain.strategies, policy.headline)
    ranking = _ranking(scorer_of(chain), outcome.candidates, selection)
    chosen = ranking.best()
    result = _render.decision(
        request_id,
        selection,
        prepared.facts,
        filtered.messages,
        outcome,
        ranking,
        chosen,
        chain.max_candidates,
    )
    if prepared.diffusion_args is None or chosen is None:
        return Decided(result, selection.state)
    candidate = outcome.candidates[chosen]
    args = prepared.diffusion_args
    planned = _render.with_diffusion_plan(result, selection, prepared.facts, candidate, args)
    return Decided(planned, selection.state)


def _ranking(scorer: Scorer, candidates: Sequence[Candidate], selection: Selection) -> Ranking:
    """The scorer's pick and scores: kept across decisions when it keeps them (``rank``),
    else every candidate scored (``score``) and its ``pick``."""
    rank = getattr(scorer, "rank", None)  # a KeptRanking (a runtime Protocol check costs far more)
    if rank is not None:
        kept: Ranking | None = rank(candidates, selection)
        if kept is not None:
            return kept
    scores = scorer.score(candidates, selection)
    return ListRanking(scores, scorer.pick(candidates, scores))


def _filtered(
    model: ModelSpec, views: Sequence[WorkerView], filters: Sequence[WorkerFilter], memo: SnapshotMemo | None
) -> FilterChainOutcome:
    """The filter chain's outcome; with a memo, reused while the views are the same objects and
    the filters read the same of the model (each built-in filter says what: ``model_key``)."""
    readers = [getattr(worker_filter, "model_key", None) for worker_filter in filters]
    if memo is None or None in readers:
        return run_filters(model, views, filters)
    table: dict[Hashable, FilterChainOutcome] = memo.derived(FILTERED, views, dict)
    key = tuple(read(model) for read in readers if read is not None)
    found = table.get(key)
    if found is None:
        if len(table) >= FILTERED_KEPT:
            table.clear()
        found = table[key] = run_filters(model, views, filters)
    return found


def _selection(
    request: ScheduleRequest,
    prepared: Prepared,
    workers: Sequence[WorkerView],
    memo: SnapshotMemo | None,
    chain: Chain,
    policy: Policy,
) -> Selection:
    """Phase 4's inputs, complete: the strategies' own facts (their ``prepare``), cluster view
    (without the claim of the instance replaced, when the policy honours ``replaces``),
    ordering, grouping and the fractions."""
    model = request.model
    state = _cycle_state(request, prepared, chain)
    instances = _counted_instances(request, policy.leaves_out_replaced)
    cluster = ClusterState(prepared.views, instances, memo)
    # A memo keeps the ordering and the per-type copies while the filter passes the same
    # views, so the copies keep their identity across decisions (the runner's reuse needs it).
    ordered, grouped = _reused(memo, ORDERED, workers, lambda: _grouped(workers))
    categories = prepared.categories
    diffusion = "image" in categories
    fractions: dict[str | None, float] = {"*": 0.0}
    if not diffusion:
        fractions.update(_fractions(prepared, model, cluster, grouped, memo))
    plan = prepared.plan
    return Selection(
        model=model,
        categories=categories,
        model_params=prepared.model_params,
        cluster=cluster,
        vram_claim=estimate_vram(model, categories, prepared.facts),
        ram_claim=model_ram_claim(model),
        mfs_by_type=fractions,
        gpu_count=plan.gpu_count,
        manual=plan.manual,
        selected_workers=plan.selected_workers,
        tp_rule=TpRule.of(prepared.model_params, plan.check_vision_tp),
        ordered=ordered,
        workers_by_type=grouped,
        runner=StageRunner(cluster, memo),
        state=state,
    )


def _cycle_state(request: ScheduleRequest, prepared: Prepared, chain: Chain) -> CycleState:
    """Every strategy's ``prepare`` on the request (raises what they raise)."""
    inputs = DecisionInputs(
        request, prepared.facts, prepared.model_params, prepared.plan.params, prepared.categories,
        chain.settings,
    )
    return chain.prepare(inputs)


def _check_replaces(request: ScheduleRequest) -> None:
    """``replaces`` must name an instance row of the request (both keys the same row).

    Raises:
        RequestError: on ``replaces``, when no row matches (the claim the operator meant
            to leave out would still be counted).
    """
    replaced = request.replaces
    if replaced is None or any(replaced.matches(i) for i in request.model_instances or ()):
        return
    named = [f"id {replaced.id}" if replaced.id is not None else "",
             f"name {replaced.name!r}" if replaced.name is not None else ""]
    raise RequestError("replaces", f"matches no instance ({' and '.join(n for n in named if n)})")


def _counted_instances(request: ScheduleRequest, leaves_out_replaced: bool) -> Sequence[ModelInstance]:
    """The instances whose claims count: all of them, except (when the policy honours
    ``replaces``) the one the request replaces."""
    instances = request.model_instances or ()
    replaced = request.replaces
    if not leaves_out_replaced or replaced is None:
        return instances
    return [instance for instance in instances if not replaced.matches(instance)]


def _grouped(
    workers: Sequence[WorkerView],
) -> tuple[tuple[WorkerView, ...], dict[str | None, tuple[WorkerView, ...]]]:
    """The workers by GPU count, and per GPU type (tuples: what the memo keeps them as)."""
    ordered = tuple(sort_workers_by_gpu_count(workers))
    return ordered, {gpu_type: tuple(group) for gpu_type, group in group_workers_by_gpu_type(ordered).items()}


def _fractions(
    prepared: Prepared,
    model: ModelSpec,
    cluster: ClusterState,
    grouped: Mapping[str | None, Sequence[WorkerView]],
    memo: SnapshotMemo | None,
) -> dict[str | None, float]:
    """GPUStack's ``cal_mem_fraction_static``: one fraction per GPU type present.

    Under manual selection only the selected types get one; the user's
    ``--mem-fraction-static`` replaces the calculator. GPUStack computes them
    before sorting the workers; order does not change a minimum.
    """
    plan = prepared.plan
    flags = FractionFlags.from_parameters(plan.params)
    valid = set(plan.manual.by_type) if plan.manual.by_type else set(grouped)
    fractions: dict[str | None, float] = {}
    for gpu_type, workers in grouped.items():
        if gpu_type not in valid:
            continue
        if prepared.user_fraction > 0:
            fractions[gpu_type] = prepared.user_fraction
            continue
        calculator = MemFractionCalculator(
            flags, plan.manual, gpu_type, cluster, prepared.model_params.vision_config
        )
        fractions[gpu_type] = calculator.fraction(_fraction_inputs(calculator, gpu_type, workers, memo))
    return fractions


def _fraction_inputs(
    calculator: MemFractionCalculator,
    gpu_type: str | None,
    workers: Sequence[WorkerView],
    memo: SnapshotMemo | None,
) -> FractionInputs:
    """The calculator's worker inputs, reused while the same workers are passed (no manual selection)."""
    if not calculator.inputs_depend_on_workers_only:
        return calculator.inputs(workers)
    return _reused(memo, FRACTION_INPUTS.of(gpu_type), workers, lambda: calculator.inputs(workers))
