"""Unexpected exceptions: retry a message ``max_task_errors`` times, then dead-letter it.

Each exception is counted per message (``gpusched:errors:<task_id>``); below
the budget the message is requeued after ``transient_backoff_s``, at the
budget it is dead-lettered and its request finished
(:mod:`tasks.runtime.middleware.dead_letters`). Redis/broker outages (a soft
time limit that fired while waiting on Redis included:
:func:`~tasks.runtime.middleware.transient.outage_of`) and Celery's own
``Ignore``/``Reject`` pass through untouched.
"""

from __future__ import annotations

import time
from typing import Any, NoReturn

from celery.exceptions import Ignore, Reject  # type: ignore[import-untyped]

from tasks.base.logging import get_logger
from tasks.runtime.middleware.base import Delivery, Middleware, Proceed
from tasks.runtime.middleware.dead_letters import give_up
from tasks.state.outages import outage_of

log = get_logger(__name__)


class RetryTaskErrors(Middleware):
    """Requeues a message that raised, up to ``max_task_errors`` times, then dead-letters it."""

    def around_task(self, delivery: Delivery, proceed: Proceed) -> Any:
        """Run the task; count and handle an unexpected exception."""
        try:
            return proceed()
        except (Ignore, Reject):
            raise
        except Exception as error:
            if outage_of(error) is not None:
                raise
            self._failed(delivery, error)

    def _failed(self, delivery: Delivery, error: Exception) -> NoReturn:
        rt = delivery.rt
        errors = rt.deliveries.count_error(delivery.task_id)
        log.error("task_error", error=repr(error), errors=errors, exc_info=error)
        if errors < rt.settings.max_task_errors:
            time.sleep(rt.settings.transient_backoff_s)
            raise Reject(error, requeue=True)
        rt.deliveries.clear_errors(delivery.task_id)
        give_up(delivery, "task_error", f"{type(error).__name__}: {error}", errors)
