"""Queueing decisions: send the ``gpusched.decide`` (or ``decide_batch``) message, arm the watchdog."""

from __future__ import annotations

from collections.abc import Sequence

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


def enqueue_many(rt: Runtime, items: Sequence[tuple[str, int, int]]) -> None:
    """Send many decisions as ``gpusched.decide_batch`` messages, then arm their watchdogs.

    The outbox entries are the same as for single messages: a lost batch is
    re-driven request by request (:func:`dispatch_many` says how they are sent).
    """
    for chunk in dispatch_many(rt, items):
        rt.delays.arm_watchdogs(chunk)


def dispatch_many(rt: Runtime, items: Sequence[tuple[str, int, int]]) -> list[list[tuple[str, int, int]]]:
    """Send many decisions: up to ``decide_batch_size`` per ``gpusched.decide_batch`` message.

    In the order given; a lone request (or a runtime without a batch sender)
    goes as its own ``gpusched.decide`` message, exactly as a single decision is
    sent. Returns the items sent, message by message (their watchdogs are the
    caller's).
    """
    size = rt.settings.decide_batch_size if rt.dispatch_batch is not None else 1
    chunks = [list(items[start : start + size]) for start in range(0, len(items), size)]
    for chunk in chunks:
        if rt.dispatch_batch is not None and len(chunk) > 1:
            rt.dispatch_batch(chunk)
        else:
            rt.dispatch(*chunk[0], 0.0)
    return chunks
