"""Each worker node runs the audit retention pass (checkpoints, trimming, expiry) on a thread.

:func:`tasks.audit.retention.maintain` every ``maintenance_interval_s``; a
Redis lease lets one node per interval do the work, so any number of nodes
may run the thread. No pass runs while the data generation is not intact (a
wiped or rolled-back Redis, :mod:`tasks.state.generation`): it would
checkpoint, trim and expire a state that is not the service's.
"""

from __future__ import annotations

from tasks.audit.retention import maintain
from tasks.base.logging import get_logger
from tasks.runtime.middleware.base import Middleware, RuntimeFactory
from tasks.runtime.periodic import PeriodicThread
from tasks.state.context import check_data_generation

log = get_logger(__name__)


class AuditRetention(Middleware):
    """Starts the retention thread on boot, stops it on shutdown."""

    def __init__(self) -> None:
        self._thread: PeriodicThread | None = None

    def after_worker_boot(self, node: str, runtime: RuntimeFactory) -> None:
        """Run a retention pass every ``maintenance_interval_s`` (the first one after it)."""

        def work() -> None:
            rt = runtime()
            if not check_data_generation(rt).ok:
                return
            done = maintain(rt)
            if done.get("checkpoint") is not None or done.get("trimmed") or done.get("expired"):
                log.info("audit_retention", **done)

        interval = runtime().settings.maintenance_interval_s
        self._thread = PeriodicThread("gpusched-retention", interval, work)
        self._thread.start()

    def before_worker_shutdown(self, node: str, runtime: RuntimeFactory) -> None:
        """Stop after the current pass."""
        if self._thread is not None:
            self._thread.stop()
