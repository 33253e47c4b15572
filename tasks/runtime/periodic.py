"""A daemon thread that runs one piece of work every ``interval`` seconds until stopped."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tasks.base.logging import get_logger
from tasks.runtime.oom_watch import WATCH
from tasks.state.outages import is_out_of_memory

log = get_logger(__name__)


class PeriodicThread(threading.Thread):
    """Runs ``work`` every ``interval`` seconds until :meth:`stop`; errors are logged, not fatal."""

    def __init__(self, name: str, interval: float, work: Callable[[], Any]) -> None:
        super().__init__(name=name, daemon=True)
        self.interval = interval
        self.work = work
        self._stopped = threading.Event()

    def run(self) -> None:
        """Loop until stopped."""
        while not self._stopped.wait(self.interval):
            try:
                self.work()
            except Exception as error:  # a Redis outage must not kill the thread
                if is_out_of_memory(error):  # alerted once per outage, not on every pass
                    WATCH.refused(self.name, error)
                    continue
                log.warning("periodic_work_failed", thread=self.name, error=repr(error))

    def stop(self) -> None:
        """Ask the loop to end after the current pass."""
        self._stopped.set()
