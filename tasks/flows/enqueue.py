"""Queueing a decision: send the ``gpusched.decide`` message, then arm its watchdog."""

from __future__ import annotations

from tasks.state.context import Runtime


def enqueue(rt: Runtime, request_id: str, seq: int, attempt: int, *, countdown: float = 0.0) -> None:
    """Send a decision to the queue, then move its outbox entry to the watchdog deadline.

    Every request that is neither finished nor parked keeps one outbox entry
    (``<id>|<seq>|<attempt>``), written by the same Lua step that made it need
    a decision and removed by the step that finishes or parks it. Until the
    message is sent the entry is due after ``outbox_lease_s`` (the sender may
    die); once sent, after ``stuck_after_s`` (the message may still be lost,
    e.g. popped by a consumer when Redis died): whenever it comes due, the
    drainer drives the request again.
    """
    rt.dispatch(request_id, seq, attempt, countdown)
    rt.delays.arm_watchdog(request_id, seq, attempt)
