"""Delayed work without Celery ETAs: the outbox and the timers, drained periodically.

Celery ETA/countdown messages wait unacknowledged in a worker's memory and are
redelivered (and run twice) when they outlive the broker's visibility
timeout. So anything that must happen later lives in a Redis sorted set
scored by its due time (ms):

* ``gpusched:outbox`` — ``<request_id>|<seq>|<attempt>``: the watchdog of
  every request in flight. The Lua step that makes a request need a decision
  (accept, wake, conflict retry, requeue) adds the entry; the fast path sends
  the message at once and pushes the entry to ``stuck_after_s``; the step
  that finishes or parks the request removes it. When an entry comes due,
  the request was lost somewhere (sender died, message popped by a consumer
  as Redis died, ...) or is still waiting in a long queue backlog, and the
  drainer sends it again (``redrive.lua``): a decision, or the publish step
  of a request that is already booked. Each re-drive is logged
  (``sched.request.redriven``) and doubles the wait before the next one (up
  to ``2**REDRIVE_DOUBLINGS`` periods), so a backlog gets a logarithmic
  number of extra messages; an extra message is harmless (one decision is
  recorded per attempt; the others continue with it).
* ``gpusched:timers`` — ``grace:<worker>`` / ``stable:<worker>`` (the
  rescheduling hysteresis clocks) and ``retry:<request>|<seq>`` (conflict
  back-offs) of :mod:`tasks.flows.timers`.
* ``gpusched:followups`` — cluster changes whose follow-up work (reschedule,
  expire, wake) the caller did not finish (:func:`tasks.flows.followups.run_followup`).

Each worker node runs :func:`drain_once` on a thread in its main process
(:mod:`tasks.runtime.middleware.delay_drainer`, started on ``worker_ready``: no
celery beat needed); ``gpusched.drain_delayed`` runs the same pass on demand.
Members are leased, not popped (``claim_due.lua``), so a drainer that dies
mid-pass loses nothing; acting twice is harmless because decisions are
guarded by ``(seq, attempt)`` and the recorded decision, follow-ups are
idempotent and timers re-check state.
"""

from __future__ import annotations

from tasks.base.lifecycle import RecordState
from tasks.base.logging import get_logger
from tasks.base.step import resumed_step
from tasks.flows.enqueue import dispatch_many
from tasks.flows.followups import run_followup
from tasks.flows.timers import fire_timer
from tasks.runtime.oom_watch import WATCH, report_outages
from tasks.state.context import Runtime
from tasks.state.context import check_data_generation as checked
from tasks.state.delays import parse_outbox_member

log = get_logger(__name__)

#: Members handled per set and pass.
BATCH = 200


def drain_once(rt: Runtime) -> dict[str, int]:
    """One pass over the three sets; returns how many entries were handled.

    Also reports the out-of-memory outages this process saw and that are over
    (``sched.redis.out_of_memory``, :mod:`tasks.runtime.oom_watch`). Drains
    nothing while the data generation is not intact (a wiped or rolled-back
    Redis: :mod:`tasks.runtime.middleware.data_guard`); ``refused`` is then 1.
    """
    if not checked(rt).ok:
        return {"enqueued": 0, "followups": 0, "timers": 0, "refused": 1}
    if WATCH.has_closed:
        report_outages(rt.client, rt.keys.events)
    decisions: list[tuple[str, int, int]] = []
    due = rt.delays.claim_due(rt.keys.outbox, BATCH)
    enqueued = sum(drive(rt, member, lease, decisions) for member, lease in due)
    dispatch_many(rt, decisions)  # a re-drive storm (a recovery, lost messages): in batches
    followups = 0
    for followup_id, _ in rt.delays.claim_due(rt.keys.followups, BATCH):
        done = run_followup(rt, followup_id)
        log.info("followup_run", followup=followup_id, **done)
        followups += 1
    fired = 0
    for member, lease in rt.delays.claim_due(rt.keys.timers, BATCH):
        outcome = fire_timer(rt, member)
        log.info("timer_fired", **outcome)
        rt.delays.ack_due(rt.keys.timers, member, lease)
        fired += 1
    return {"enqueued": enqueued, "followups": followups, "timers": fired}


def drive(rt: Runtime, member: str, lease: int, decisions: list[tuple[str, int, int]] | None = None) -> int:
    """Re-drive one due outbox entry according to its request's state; 1 if sent.

    Args:
        decisions: where to add a decision to send (the caller sends them, in batches);
            None: send it now, alone.
    """
    request_id, seq, attempt = parse_outbox_member(member)
    action, detail = rt.delays.redrive(request_id, seq, attempt, lease)
    if action == "gone":
        return 0
    if action == "publish":  # booked, but the publish step never ran
        step = resumed_step(RecordState.BOOKED, detail, seq, attempt)
        if step is None:
            return 0
        rt.resume(step.to_dict())
    elif decisions is not None:
        decisions.append((request_id, seq, attempt))
    else:
        rt.dispatch(request_id, seq, attempt, 0.0)
    log.info("request_redriven", request_id=request_id, action=action, seq=seq, attempt=attempt)
    return 1
