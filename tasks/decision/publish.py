"""The last step of a decision: publish its terminal result, or park the request.

A ``scheduled`` result is published only once its decision is booked
(``publish.lua`` checks the record), and every step acts only for the
recorded decision (its result digest). Parking checks the wake epoch the
decision read: a cluster change that landed meanwhile turns the park into an
immediate requeue.
"""

from __future__ import annotations

from tasks.base.events import dumps
from tasks.base.step import PARK, PUBLISH, Step
from tasks.flows import metrics
from tasks.flows.enqueue import enqueue
from tasks.state.context import Runtime
from tasks.state.parking import CONFLICT_REASON, ParkedEntry, parked_json
from tasks.state.partition import OutcomeReply
from tasks.state.scripts import ScriptCall


def publish(rt: Runtime, step: Step) -> str | None:
    """Publish the terminal result, or park the request. Returns the outcome name."""
    final = final_call(rt, step)
    return None if final is None else after_final(rt, step, rt.partition.call(final))


def park(rt: Runtime, step: Step) -> str:
    """Park with the blocking reasons (or requeue at once if the cluster changed meanwhile).

    A request parked only because its reservations kept conflicting is not
    announced as unschedulable (it is merely contended) and is retried after
    ``conflict_retry_after_s`` by a timer armed in the same step, besides any
    wake-up by capacity.
    """
    return _after_park(rt, step, rt.partition.call(_park_call(rt, step)))


def final_call(rt: Runtime, step: Step) -> ScriptCall[OutcomeReply] | None:
    """The publish or park call of a step (None for any other action)."""
    if step.action == PARK:
        return _park_call(rt, step)
    if step.action != PUBLISH:
        return None
    status = "scheduled" if step.status == "scheduled" else "rejected"
    rejected = dumps({"error": step.error}) if status == "rejected" else ""
    return rt.results.publish_call(
        step.request_id, status, seq=step.seq, attempt=step.attempt,
        result_digest=step.result_digest, rejected_data=rejected,
    )


def after_final(rt: Runtime, step: Step, reply: OutcomeReply) -> str:
    """The outcome name of a publish or park reply (queues the decision a park turned into)."""
    return _after_park(rt, step, reply) if step.action == PARK else reply[0]


def retry_timer(request_id: str, seq: int) -> str:
    """Timer member that wakes a request parked by reservation conflicts."""
    return f"retry:{request_id}|{seq}"


def _park_call(rt: Runtime, step: Step) -> ScriptCall[OutcomeReply]:
    contended = step.reasons == [CONFLICT_REASON]
    now = rt.partition.now_ms()
    entry = ParkedEntry(
        seq=step.seq, reasons=step.reasons, decided_version=step.version, parked_ms=now,
        **step.park,
    )
    retry = None
    if contended:
        retry = (retry_timer(step.request_id, step.seq), now + int(rt.settings.conflict_retry_after_s * 1000))
    return rt.parked.park_call(
        step.request_id, step.seq, step.attempt, result_digest=step.result_digest,
        parked_entry=parked_json(entry), notice_json=step.notice,
        event_data=dumps({"seq": step.seq, "reasons": step.reasons, "cluster_version": step.version}),
        epoch=step.epoch, requeue_due_ms=now + int(rt.settings.outbox_lease_s * 1000),
        announce=not contended, retry_timer=retry,
    )


def _after_park(rt: Runtime, step: Step, reply: OutcomeReply) -> str:
    outcome, detail = reply
    if outcome == "requeued" and detail is not None:
        metrics.count_wakeups(1)  # the cluster changed while it was being decided
        enqueue(rt, step.request_id, int(detail), 0)
    return outcome
