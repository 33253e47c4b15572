"""The garbage collector of a worker process, run between messages instead of inside them.

A decider keeps a large heap across messages (its cluster mirror and memo: about
250,000 tracked objects at 2,000 × 8 GPUs) and creates almost no reference cycles:
the collector's automatic full passes over it took 100-140 ms every ten seconds or
so under load and found nothing, and each one held up every request queued behind
it. So, around every task message:

* the collector is paused for the message (the decisions inside pause it too:
  :func:`scheduler_core.deciding`);
* after it (the decide lease already released), the young generations are collected
  (the cycles the message made, a few milliseconds) and every survivor is frozen
  (``gc.freeze``), so the automatic passes that follow see only what is newer;
* every ``collector_refresh_s`` seconds, still between messages, the frozen heap is
  released and collected in full (``gc.unfreeze`` then ``gc.collect``): a cycle among
  long-lived objects that became garbage is freed within that period.

A caller that runs with the collector off (it was off when the message started)
keeps it off, and nothing is frozen for it.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from scheduler_core import deciding
from tasks.runtime.middleware.base import Delivery, Middleware, Proceed


class CollectBetweenMessages(Middleware):
    """Pause the collector for each message; collect the young and freeze the rest after it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._refreshed: float | None = None

    def around_task(self, delivery: Delivery, proceed: Proceed) -> Any:
        """Run the message with the collector paused, then collect between messages."""
        if not gc.isenabled():
            return proceed()
        with deciding():  # the core's own pause (restores the collector on exit)
            try:
                return proceed()
            finally:
                self.between_messages(delivery.rt.settings.collector_refresh_s)

    def between_messages(self, refresh_s: float) -> None:
        """The young generations collected and the survivors frozen; every ``refresh_s``, the
        frozen heap released and collected in full first."""
        now = self._clock()
        if self._refreshed is None:
            self._refreshed = now
        if now - self._refreshed >= refresh_s:
            gc.unfreeze()
            gc.collect()
            self._refreshed = now
        else:
            gc.collect(1)
        gc.freeze()
