"""Nothing runs against a Redis that lost the service's data: the message waits, requeued.

Before every task message, and on the worker node's boot, the runtime checks
the data generation (:mod:`tasks.state.generation`: one ``MGET``). A wiped,
rolled-back or replaced Redis — or a loss someone detected and nobody
recovered — refuses the task: the message is requeued after
``transient_backoff_s`` (kept, never counted as a crash or an error), except a
cluster event, which is dead-lettered (reason ``data_lost``): the recovery's
snapshot is newer than any event sent before it. The worker says so
(``deciding_refused``, once per verdict and process; the loss itself is
logged ``data_lost`` and written as ``sched.data.lost`` by the check). After
a recovery the runtime adopts the new generation and reloads its cluster
mirror. Redis errors of the check itself are outages for
:mod:`~tasks.runtime.middleware.transient`, which runs outside this one.
"""

from __future__ import annotations

import threading
import time
from typing import Any, NoReturn

from celery.exceptions import Reject  # type: ignore[import-untyped]

from tasks.base.logging import get_logger
from tasks.runtime.middleware.base import Delivery, Middleware, Proceed, RuntimeFactory
from tasks.runtime.middleware.dead_letters import give_up
from tasks.runtime.task_contract import CLUSTER_EVENT
from tasks.state.context import check_data_generation as checked
from tasks.state.generation import DataLost, GenerationStatus
from tasks.state.outages import TRANSIENT_ERRORS

log = get_logger(__name__)


class RefuseWithoutData(Middleware):
    """Requeues every message while the data generation is not intact; checks it on boot."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_verdict = "ok"

    def around_task(self, delivery: Delivery, proceed: Proceed) -> Any:
        """Check the generation, then run the rest of the stack (or requeue the message)."""
        status = checked(delivery.rt)
        if not status.ok:
            self._refuse(delivery, status)
        self._note(status)
        return proceed()

    def after_worker_boot(self, node: str, runtime: RuntimeFactory) -> None:
        """Learn (or write) the generation before serving, so pool processes forked later know it."""
        try:
            status = checked(runtime())
        except TRANSIENT_ERRORS as error:
            log.warning("data_generation_unchecked", node=node, error=repr(error))
            return
        self._note(status)

    def _refuse(self, delivery: Delivery, status: GenerationStatus) -> NoReturn:
        self._note(status)
        if delivery.task_name == CLUSTER_EVENT:
            give_up(delivery, "data_lost", status.detail, 0)
        time.sleep(delivery.rt.settings.transient_backoff_s)
        raise Reject(DataLost(status), requeue=True)

    def _note(self, status: GenerationStatus) -> None:
        """Log a change of verdict once per process (every message of a halt would flood the log)."""
        verdict = "ok" if status.ok else status.verdict
        with self._lock:
            changed, self._last_verdict = verdict != self._last_verdict, verdict
        if changed and verdict == "ok":
            log.warning("deciding_resumed", detail=status.detail)
        elif changed:
            log.error("deciding_refused", verdict=status.verdict, detail=status.detail,
                      action="messages are requeued until a recovery: see docs/service.md, Recovery")

