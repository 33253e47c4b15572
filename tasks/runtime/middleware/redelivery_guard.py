"""The redelivery guard: a message whose deliveries keep dying is dead-lettered, not looped.

Each start of a message is counted in ``gpusched:delivery:<task_id>`` (once,
however often Redis is asked: one member per start) and the count is cleared
whenever a delivery ends without its process dying
(success, ``Ignore``, ``Reject``, a requeue after a Redis/broker error), so
the count is the number of starts that never finished — the pool process
died (SIGKILL, OOM, hard time limit; ``task_reject_on_worker_lost`` put the
message back). Past ``max_crashes`` the message is dead-lettered
(:mod:`tasks.runtime.middleware.dead_letters`). A clear that fails because
Redis is unreachable is remembered and done by this process before its next
task, so a requeue during an outage is not counted as a crash; after a
requeue the clear waits at most the time it is given (a pool process killed
by the hard time limit while waiting would count as a crash).
"""

from __future__ import annotations

from typing import Any

import redis
from celery.exceptions import Ignore, Reject  # type: ignore[import-untyped]

from tasks.base.logging import get_logger
from tasks.runtime.middleware.base import Delivery, Middleware, Proceed
from tasks.runtime.middleware.dead_letters import give_up
from tasks.state.context import Runtime, impatient_client
from tasks.state.outages import TRANSIENT_ERRORS

log = get_logger(__name__)


class RedeliveryGuard(Middleware):
    """Counts each delivery's start; dead-letters a message past ``max_crashes``."""

    def __init__(self) -> None:
        #: Delivery counts this process could not clear (Redis was unreachable).
        self._uncleared: set[str] = set()

    def around_task(self, delivery: Delivery, proceed: Proceed) -> Any:
        """Count the start, give up past the budget, clear the count when the delivery ends."""
        rt = delivery.rt
        self._clear_uncleared(rt)
        crashes = rt.deliveries.count_delivery(delivery.task_id, delivery.start)
        delivery.counted = True
        try:
            if crashes > rt.settings.max_crashes:
                give_up(delivery, "worker_lost_repeatedly",
                        f"{crashes - 1} deliveries died before finishing", crashes)
            outcome = proceed()
        except (Ignore, Reject):
            self.finished(delivery)
            raise
        self.finished(delivery)
        return outcome

    def finished(self, delivery: Delivery, within_s: float | None = None) -> None:
        """The delivery ended without its process dying: forget its count (or remember to).

        Args:
            within_s: wait at most this long for Redis (a client of its own with
                that socket timeout and no retry); None: the runtime's client.
        """
        try:
            if within_s is None:
                delivery.rt.deliveries.clear_delivery(delivery.task_id)
            elif within_s > 0:
                with impatient_client(delivery.rt.client, within_s) as client:
                    delivery.rt.deliveries.clear_delivery(delivery.task_id, client=client)
            else:
                raise redis.TimeoutError("no time left to clear the delivery count")
        except TRANSIENT_ERRORS:
            self._uncleared.add(delivery.task_id)
            log.warning("delivery_count_not_cleared", task_id=delivery.task_id)

    def _clear_uncleared(self, rt: Runtime) -> None:
        for task_id in list(self._uncleared):
            rt.deliveries.clear_delivery(task_id)
            self._uncleared.discard(task_id)
