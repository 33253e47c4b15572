"""Redis or broker outages: requeue the message after a back-off, never count it as a failure.

The back-off is ``transient_backoff_s``, doubled with each outage in a row of
the same message, at most :data:`MAX_BACKOFF_FACTOR` times it
(:class:`Backoff`); the message is requeued for as long as its request lives.

What counts as an outage — Redis unreachable, out of memory, or stalled past
the soft time limit — is :func:`tasks.state.outages.outage_of`. Out of
memory, the first refusal of an outage is the alert
(:mod:`tasks.runtime.oom_watch`); its event follows once writes are
accepted again. The state a task had written is idempotent, so the
redelivered message resumes where this one stopped. Also covers errors raised
by the other middleware themselves (the guard's counters live in Redis too).
Before requeueing, the redelivery guard's count of this start is cleared
within :func:`clear_budget_s` — after a soft time limit the hard limit is
near, and a pool process killed by it would count as a crash — or, when Redis
does not answer in time, by this process before its next task.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from celery.exceptions import Reject, SoftTimeLimitExceeded  # type: ignore[import-untyped]

from tasks.base.logging import get_logger
from tasks.runtime.middleware.base import Delivery, Middleware, Proceed
from tasks.runtime.oom_watch import WATCH, report_outages
from tasks.state.outages import outage_of

log = get_logger(__name__)

#: Longest wait (s) for the guard's count to be cleared before requeueing.
MAX_CLEAR_S = 2.0
#: Kept free (s) before the hard time limit when clearing after a soft one.
HARD_LIMIT_MARGIN_S = 0.5

#: Uncounts a delivery's start, waiting at most the given seconds for Redis.
Uncount = Callable[[Delivery, float], None]
#: The back-off doubles with each outage in a row of one message, up to this many times the base.
MAX_BACKOFF_FACTOR = 8
#: Messages whose outages in a row this process remembers (the oldest is forgotten first).
MAX_REMEMBERED = 1024


class Backoff:
    """How long to wait before requeueing a message after an outage: ``transient_backoff_s``,
    doubled with each outage in a row of the same message (a broker that keeps failing is
    not hammered), at most :data:`MAX_BACKOFF_FACTOR` times it. Never a count: the message is
    requeued for as long as its request lives; a delivery that gets through resets it."""

    def __init__(self) -> None:
        self._outages: dict[str, int] = {}

    def next_s(self, task_id: str, base_s: float) -> float:
        """The wait before this requeue (and remember one more outage of ``task_id``)."""
        outages = self._outages.pop(task_id, 0) + 1
        self._outages[task_id] = outages
        while len(self._outages) > MAX_REMEMBERED:
            self._outages.pop(next(iter(self._outages)))
        factor: int = min(2 ** (outages - 1), MAX_BACKOFF_FACTOR)
        return base_s * factor

    def got_through(self, task_id: str) -> None:
        """The message's delivery ended without an outage."""
        self._outages.pop(task_id, None)


def clear_budget_s(delivery: Delivery, outage: str) -> float:
    """Seconds the guard's count may take to clear: short, and before the hard time limit."""
    settings = delivery.rt.settings
    if outage != "stalled":
        return MAX_CLEAR_S
    left = settings.task_time_limit_s - (time.monotonic() - delivery.started) - HARD_LIMIT_MARGIN_S
    return max(0.0, min(MAX_CLEAR_S, left))


class RequeueOnOutage(Middleware):
    """Outermost: an outage anywhere below requeues the message after ``transient_backoff_s``.

    Args:
        uncount: the redelivery guard's
            :meth:`~tasks.runtime.middleware.redelivery_guard.RedeliveryGuard.finished`,
            called for a delivery whose start was counted.
    """

    def __init__(self, uncount: Uncount) -> None:
        self._uncount = uncount
        self._backoff = Backoff()

    def around_task(self, delivery: Delivery, proceed: Proceed) -> Any:
        """Run the rest of the stack; on an outage, back off and requeue."""
        try:
            outcome = proceed()
        except Exception as error:
            outage = outage_of(error)
            if outage is None:
                self._backoff.got_through(delivery.task_id)
                raise
            self._requeue(delivery, outage, error)
        self._backoff.got_through(delivery.task_id)
        WATCH.accepted()
        if WATCH.has_closed:
            report_outages(delivery.rt.client, delivery.rt.keys.events)
        return outcome

    def _requeue(self, delivery: Delivery, outage: str, error: Exception) -> None:
        if outage == "out_of_memory":
            WATCH.refused(f"task {delivery.task_name}", error)
        elif outage == "stalled":
            log.warning("redis_stalled", error=repr(error), task=delivery.task_name,
                        detail="the soft time limit fired while waiting on Redis: requeued, not counted")
        else:
            log.warning("transient_error_requeue", error=repr(error))
        try:
            if outage != "stalled":  # a stall already waited; the hard limit is near
                time.sleep(self._wait_s(delivery))
            if delivery.counted:
                self._uncount(delivery, clear_budget_s(delivery, outage))
        except SoftTimeLimitExceeded:  # fired during the back-off: requeue all the same
            pass
        raise Reject(error, requeue=True) from error

    def _wait_s(self, delivery: Delivery) -> float:
        """The back-off, ending before the soft time limit (a requeue must not be cut short)."""
        settings = delivery.rt.settings
        wait = self._backoff.next_s(delivery.task_id, settings.transient_backoff_s)
        left = settings.task_soft_time_limit_s - (time.monotonic() - delivery.started) - MAX_CLEAR_S
        return max(0.0, min(wait, left))

