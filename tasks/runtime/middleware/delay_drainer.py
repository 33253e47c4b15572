"""Each worker node drains the delay sets (outbox, follow-ups, timers) on a thread of its own.

No celery beat is needed: every node runs :func:`tasks.runtime.drainer.drain_once`
every ``drain_interval_s`` from boot to shutdown; members are leased, so
several nodes draining at once is harmless. With replicas required, each pass
also acknowledges writes no task could (:func:`~tasks.runtime.middleware.replica_ack.catch_up`).
"""

from __future__ import annotations

from tasks.base import liveness
from tasks.runtime.drainer import drain_once
from tasks.runtime.middleware.base import Middleware, RuntimeFactory
from tasks.runtime.middleware.replica_ack import catch_up
from tasks.runtime.periodic import PeriodicThread


class DelayDrainer(Middleware):
    """Starts the drainer thread on boot, stops it on shutdown."""

    def __init__(self) -> None:
        self._thread: PeriodicThread | None = None

    def after_worker_boot(self, node: str, runtime: RuntimeFactory) -> None:
        """Start draining every ``drain_interval_s``."""
        interval = runtime().settings.drain_interval_s
        self._thread = PeriodicThread("gpusched-drainer", interval, lambda: _pass(runtime))
        self._thread.start()

    def before_worker_shutdown(self, node: str, runtime: RuntimeFactory) -> None:
        """Stop after the current pass."""
        if self._thread is not None:
            self._thread.stop()


def _pass(runtime: RuntimeFactory) -> None:
    """One drainer pass, then acknowledging what no task could (a replica was late: see
    :mod:`~tasks.runtime.middleware.replica_ack`); marked live only when it finished (see
    :mod:`tasks.base.liveness`)."""
    rt = runtime()
    drain_once(rt)
    if rt.replication.required:
        catch_up(rt)
    liveness.mark(liveness.DRAINER)
