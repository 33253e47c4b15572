"""Booking a decided placement (Nomad's serial plan commit), and what a conflict does.

A reservation books every GPU of the chosen candidate or none
(``reserve.lua`` re-checks ``booked + claim ≤ capacity`` against the ledger).
A conflict retries with a fresh snapshot after a deterministic jitter
(seeded from the request id and attempt), at most ``conflict_max_attempts``
times per decision, then parks with ``conflict_retries_exhausted``.
"""

from __future__ import annotations

import random

from tasks.base.events import dumps
from tasks.base.lifecycle import RecordState
from tasks.base.step import PARK, PUBLISH, RESERVE, Step
from tasks.decision.notices import exhausted_notice
from tasks.flows import metrics
from tasks.flows.enqueue import enqueue
from tasks.state.cluster_store import Booking, Reserved
from tasks.state.context import Runtime
from tasks.state.parking import CONFLICT_REASON
from tasks.state.scripts import ScriptCall


def jitter_s(rt: Runtime, request_id: str, seq: int, attempt: int) -> float:
    """Deterministic full jitter (seeded by the attempt) before a conflict retry."""
    base = rt.settings.conflict_jitter_ms * (2 ** min(attempt, 3)) / 1000
    rng = random.Random(f"{request_id}:{seq}:{attempt}")
    return min(rng.uniform(0, base), rt.settings.max_countdown_s)


def reserve(rt: Runtime, step: Step) -> Step | None:
    """Book the decided placement; on conflict queue a fresh decision and stop.

    Returns:
        The step to continue with (publish, or park when conflicts exhausted
        the attempts); a step that books nothing unchanged; None when a retry
        was queued or the record moved on.
    """
    if step.action != RESERVE or step.booking is None:
        return step
    return after_reserve(rt, step, rt.partition.call(reserve_call(rt, step)))


def reserve_call(rt: Runtime, step: Step) -> ScriptCall[Reserved]:
    """The booking call of a ``reserve`` step (its retry is armed by the same script)."""
    assert step.booking is not None
    booking = Booking(**step.booking)
    delay = jitter_s(rt, step.request_id, step.seq, step.attempt + 1)
    due = rt.partition.lease_deadline_ms() + int(delay * 1000)
    retried = dumps({"attempt": step.attempt + 1, "delay_ms": round(delay * 1000, 3)})
    return rt.cluster.reserve_call(
        step.request_id, step.seq, step.attempt, booking, due, retried,
        result_digest=step.result_digest,
    )


def after_reserve(rt: Runtime, step: Step, outcome: Reserved) -> Step | None:
    """The step after a reservation's reply (see :func:`reserve`)."""
    if outcome.status in (RecordState.BOOKED, "duplicate"):
        step.action = PUBLISH
        return step
    if outcome.status in ("conflict", "exhausted"):
        metrics.count_conflict()
    if outcome.status == "conflict" and outcome.next_attempt is not None:
        delay = jitter_s(rt, step.request_id, step.seq, step.attempt + 1)
        enqueue(rt, step.request_id, step.seq, outcome.next_attempt, countdown=delay)
        return None
    if outcome.status == "exhausted":
        step.action = PARK
        step.reasons = [CONFLICT_REASON]
        step.notice = exhausted_notice(step.request_id).model_dump_json()
        return step
    return None
