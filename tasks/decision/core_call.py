"""Calling the placement core: the stored request, the fold's cluster and the chain → a result.

Pure given its inputs: the decider calls it with its mirror's fold, the
replay with a fold rebuilt from the audit log, and both get the same bytes.
"""

from __future__ import annotations

import json

from pydantic import ValidationError

from scheduler_core import (
    CycleState,
    RequestError,
    ScheduleRequest,
    ScheduleResult,
    SnapshotMemo,
    decide,
    deciding,
    parse_request,
)
from tasks.intake.chain_config import LoadedChain
from tasks.intake.requests import local_path_problem, service_rejection
from tasks.state.fold import ClusterFold


def run_core(
    chain: LoadedChain,
    request_json: str,
    request_id: str,
    fold: ClusterFold,
    memo: SnapshotMemo | None = None,
    *,
    model_roots: tuple[str, ...] | None = None,
) -> tuple[ScheduleRequest | None, ScheduleResult, CycleState | None]:
    """The decision itself.

    Args:
        chain: the chain to run (its scorer may override the model's placement strategy).
        request_json: the request as stored at intake.
        request_id: the request's id (for the core's ``rejected`` result).
        fold: the cluster at the version decided on.
        memo: the decider's cross-decision memo (None: decide from scratch).
        model_roots: the deciding process's own ``model_roots``: a ``local_path``
            outside them is refused (the service's ``rejected`` result, same message
            as at intake) before the core reads the disk. The submitter checked its
            own roots at intake, which need not be this process's. None: no check
            (the replay, which re-decides what was recorded).

    Returns:
        The effective request (None if the stored request no longer validates,
        which yields the core's ``rejected`` result), the result, and the facts the
        strategies prepared for it (a parked request's wake floor reads them; None when
        no strategy ran).
    """
    try:
        request = _request_for(chain, request_json)
    except ValidationError:
        return None, _stored_rejection(request_json, request_id), None
    problem = local_path_problem(request.model, model_roots) if model_roots is not None else None
    if problem is not None:
        return request, service_rejection(request_id, problem.field, problem.message), None
    cluster = {"workers": fold.worker_list(), "model_instances": fold.instance_list()}
    with deciding():  # the collector paused for the decision (the core changes no such state)
        decided = decide(request.model_copy(update=cluster), chain=chain.chain, memo=memo)
    return request, decided.result, decided.state


def _stored_rejection(request_json: str, request_id: str) -> ScheduleResult:
    """The core validator's rejection of a stored request that no longer validates."""
    try:
        parse_request(json.loads(request_json))
    except RequestError as error:
        return service_rejection(request_id, error.field or "request", error.message)
    return service_rejection(request_id, "request", "does not validate")


def _request_for(chain: LoadedChain, request_json: str) -> ScheduleRequest:
    request = ScheduleRequest.model_validate_json(request_json)
    override = chain.placement_override
    if override and request.model.placement_strategy != override:
        model = request.model.model_copy(update={"placement_strategy": override})
        request = request.model_copy(update={"model": model})
    return request
