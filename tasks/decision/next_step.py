"""From the core's result to the decision's next step: reserve, park or publish.

* ``rejected`` → publish the rejection;
* ``unschedulable`` (or no selection) → park with the blocking reasons;
* an overcommitted pick → park (the ledger never books past allocatable
  memory) with an ``unschedulable`` notice;
* otherwise → reserve the chosen candidate's booking.
"""

from __future__ import annotations

from dataclasses import asdict

from scheduler_core import Chain, CycleState, ModelSpec, ScheduleResult, wake_floor
from tasks.base.step import PARK, PUBLISH, RESERVE, Step
from tasks.decision.booking import booking_for
from tasks.decision.notices import overcommit_notice
from tasks.intake.requests import error_of
from tasks.state.fold import ClusterFold
from tasks.state.parking import ParkedEntry, blocking_reasons


def next_step(
    request_id: str, seq: int, attempt: int, epoch: int, fold: ClusterFold,
    model: ModelSpec | None, result: ScheduleResult, chain: Chain | None = None,
    prepared: CycleState | None = None,
) -> Step:
    """The step a decision continues with.

    Args:
        request_id, seq, attempt: the decision attempt.
        epoch: the wake epoch read when the attempt began (parking checks it).
        fold: the cluster the decision saw.
        model: the effective request's model (None: the stored request no
            longer validates; the result is the core's rejection).
        result: the core's result.
        chain: the configured chain (its strategies' wake answer: which freed GPUs
            could place the request, :func:`scheduler_core.wake_floor`; None: no floor).
        prepared: the facts the decision's strategies prepared; read for the floor of a
            request that parks now (their own rules' bound), not for one that reserves (its
            park, should its reservations all conflict, keeps the estimate's looser bound).
    """
    if model is None:
        return Step(request_id, seq, attempt, PUBLISH, result.status, fold.version, epoch,
                    error=error_of(result))
    state = prepared if _parks(result) else None
    floor = wake_floor(model, result, chain, fold.worker_list(), state) if chain is not None else None
    park = ParkedEntry.for_model(model, seq, (), fold.version, 0, floor).model_dump(
        mode="json", include={"worker_selector", "gpu_ids", "cluster_id", "floor", "floor_bytes"}
    )
    step = Step(request_id, seq, attempt, PUBLISH, result.status, fold.version, epoch, park=park)
    if result.status == "rejected":
        step.error = error_of(result)
        return step
    if result.status == "unschedulable" or result.selected is None:
        step.action = PARK
        step.reasons = blocking_reasons(result, result.blocked_by)
        return step
    chosen = result.candidates[result.selected]
    if chosen.overcommit:
        step.action = PARK
        step.reasons = blocking_reasons(result, None, overcommit=True)
        step.notice = overcommit_notice(result).model_dump_json()
        return step
    step.action = RESERVE
    step.booking = asdict(booking_for(fold, request_id, model, chosen))
    return step


def _parks(result: ScheduleResult) -> bool:
    """Whether the result parks the request (nothing placed, or an overcommitted pick)."""
    if result.status == "unschedulable" or result.selected is None:
        return True
    return bool(result.candidates[result.selected].overcommit)
