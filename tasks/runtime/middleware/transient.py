"""Redis or broker outages: requeue the message after a short back-off, never count it as a failure.

The state a task had written is idempotent, so the redelivered message
resumes where this one stopped. Also covers errors raised by the other
middleware themselves (the guard's counters live in Redis too).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis
from celery.exceptions import Reject  # type: ignore[import-untyped]
from kombu.exceptions import OperationalError

from tasks.runtime.logging import get_logger
from tasks.runtime.middleware.base import Delivery, Middleware, Proceed

log = get_logger(__name__)

#: Errors that say "Redis or the broker is unavailable", not "this message is bad".
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.BusyLoadingError,
    OperationalError,
    ConnectionError,
)


class RequeueOnOutage(Middleware):
    """Outermost: a transient error anywhere below requeues the message after ``transient_backoff_s``.

    Args:
        uncount: called for a delivery whose start was counted (the redelivery
            guard's :meth:`~tasks.runtime.middleware.redelivery_guard.RedeliveryGuard.finished`).
    """

    def __init__(self, uncount: Callable[[Delivery], None]) -> None:
        self._uncount = uncount

    def around_task(self, delivery: Delivery, proceed: Proceed) -> Any:
        """Run the rest of the stack; on a transient error, back off and requeue."""
        try:
            return proceed()
        except TRANSIENT_ERRORS as error:
            log.warning("transient_error_requeue", error=repr(error))
            time.sleep(delivery.rt.settings.transient_backoff_s)
            if delivery.counted:
                self._uncount(delivery)
            raise Reject(error, requeue=True) from error
