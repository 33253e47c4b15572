"""A task's writes are acknowledged once a replica holds them (``replicas_required`` ≥ 1).

After every task message that ran, the worker acknowledges what it wrote
(:meth:`tasks.state.replication.Replication.acknowledge`: a mark and ``WAIT``,
then the position readers read up to). Results, bookings and cluster changes
become visible to the results readers and the audit only then.

When no replica confirms within ``replica_ack_timeout_s`` the message still
completes — its writes are on the master, and the message's own
acknowledgement to the broker comes after them in the replication stream, so
a failover that loses the writes loses that acknowledgement too and the
message is delivered again. Nothing is shown to readers meanwhile: each
drainer pass tries again (:func:`catch_up`) until a replica has it all, and
tasks stop waiting until then (deciding goes on at full speed). The
process logs ``writes_not_acknowledged`` once per such outage and
``writes_acknowledged_again`` when it ends. A Redis error while
acknowledging is an outage for :mod:`~tasks.runtime.middleware.transient`
(the message is requeued; running it again is idempotent).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tasks.base.logging import get_logger
from tasks.runtime.middleware.base import Delivery, Middleware, Proceed
from tasks.state.context import Runtime
from tasks.state.replication import NotReplicated

log = get_logger(__name__)

#: While acknowledgements fail, how often a task waits for one again (s); a pool process does
#: not see its node's drainer succeed, so it must find out itself when the replica is back.
RETRY_WHILE_FAILING_S = 1.0


class _Outage:
    """Whether this process's last acknowledgement failed (one log line per outage)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failing = False
        self._tried = 0.0

    def due(self) -> bool:
        """Whether a task should wait for its acknowledgement now: always, unless the last one
        failed less than :data:`RETRY_WHILE_FAILING_S` ago."""
        with self._lock:
            return not self._failing or time.monotonic() - self._tried >= RETRY_WHILE_FAILING_S

    def note(self, error: NotReplicated | None, where: str) -> None:
        with self._lock:
            changed, self._failing = (error is not None) != self._failing, error is not None
            self._tried = time.monotonic()
        if changed and error is not None:
            log.warning("writes_not_acknowledged", where=where, detail=str(error),
                        action="readers see them once a replica has them; retried every drainer pass")
        elif changed:
            log.warning("writes_acknowledged_again", where=where)


_OUTAGE = _Outage()


def catch_up(rt: Runtime, where: str = "drainer", *, only_if_new: bool = True) -> bool:
    """Acknowledge what is not acknowledged yet; False when no replica confirmed it (logged once).

    Raises:
        redis.RedisError: Redis failed (other than :class:`NotReplicated`).
    """
    try:
        rt.replication.acknowledge(only_if_new=only_if_new)
    except NotReplicated as error:
        _OUTAGE.note(error, where)
        return False
    _OUTAGE.note(None, where)
    return True


class AcknowledgeWrites(Middleware):
    """After a task ran, wait (bounded) until a replica holds what it wrote."""

    def around_task(self, delivery: Delivery, proceed: Proceed) -> Any:
        """Run the task, then acknowledge its writes (a miss is left to the drainer).

        While this process's acknowledgements fail, a task waits at most once per
        :data:`RETRY_WHILE_FAILING_S` (the drainer tries every pass), so a late replica
        does not slow deciding down to one message per ``replica_ack_timeout_s``.
        """
        value = proceed()
        if delivery.rt.replication.required and _OUTAGE.due():
            catch_up(delivery.rt, delivery.task_name, only_if_new=False)
        return value
