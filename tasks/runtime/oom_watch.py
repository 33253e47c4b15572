"""Redis out of memory, as one process sees it: one alert per outage, one event once it is over.

A Redis at ``maxmemory`` with ``noeviction`` (the only policy the service
accepts: the ledger and kombu's bindings must never be evicted) refuses every
write with ``OOM``; reads and deletes still work, and every Lua script of the
service fails at its first write, so nothing is half-applied. The workers ride
it out (:mod:`tasks.runtime.broker` for the broker's own writes,
:mod:`tasks.runtime.middleware.transient` for tasks) and record what they saw
here: the first refusal of an outage is logged at once (``redis_out_of_memory``,
level error: the alert), and once a write goes through again the outage is
closed (``redis_memory_recovered``) and reported as a ``sched.redis.out_of_memory``
event — it can only be written then — by :func:`report_outages`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from tasks.base.events import append_event
from tasks.base.logging import get_logger

log = get_logger(__name__)

#: Closed outages kept for reporting while the event cannot be written (oldest dropped first).
MAX_PENDING = 32


@dataclass(slots=True)
class Outage:
    """One span of refused writes seen by this process.

    Attributes:
        since: wall-clock time (s) of the first refusal.
        until: wall-clock time (s) of the first write accepted again (0 while open).
        refusals: writes refused meanwhile.
        where: what was refused (``task gpusched.decide``, ``broker ack``, ``drainer``, ...).
    """

    since: float
    until: float = 0.0
    refusals: int = 0
    where: set[str] = field(default_factory=set)

    def event_data(self) -> dict[str, object]:
        """Data of the ``sched.redis.out_of_memory`` event."""
        return {
            "since_ms": int(self.since * 1000),
            "until_ms": int(self.until * 1000),
            "refused_s": round(self.until - self.since, 3),
            "refusals": self.refusals,
            "where": sorted(self.where),
        }


class OutOfMemoryWatch:
    """Thread-safe record of this process's OOM outages (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._open: Outage | None = None
        self._closed: list[Outage] = []

    @property
    def refusing(self) -> bool:
        """An outage is open: the last write this process tried was refused."""
        return self._open is not None

    @property
    def has_closed(self) -> bool:
        """Closed outages wait to be reported (:func:`report_outages`)."""
        return bool(self._closed)

    def refused(self, where: str, error: BaseException) -> None:
        """A write was refused with ``OOM``; the first refusal of an outage is logged as the alert."""
        with self._lock:
            first = self._open is None
            if self._open is None:
                self._open = Outage(self._now())
            self._open.refusals += 1
            self._open.where.add(where)
        if first:
            log.error("redis_out_of_memory", where=where, error=str(error),
                      action="riding it out: messages are kept and retried with back-off")

    def accepted(self) -> None:
        """A write went through: close the open outage, if any (cheap when none is open)."""
        if self._open is None:
            return
        with self._lock:
            outage, self._open = self._open, None
            if outage is None:
                return
            outage.until = self._now()
            self._closed = [*self._closed, outage][-MAX_PENDING:]
        log.warning("redis_memory_recovered", **outage.event_data())

    def take_closed(self) -> list[Outage]:
        """The closed outages not reported yet (the caller reports them or gives them back)."""
        with self._lock:
            closed, self._closed = self._closed, []
        return closed

    def give_back(self, outages: list[Outage]) -> None:
        """Outages whose report failed, to be reported on the next try."""
        with self._lock:
            self._closed = [*outages, *self._closed][-MAX_PENDING:]

    def reset(self) -> None:
        """Forget every outage (tests start each case from a clean watch)."""
        with self._lock:
            self._open, self._closed = None, []

    def _now(self) -> float:
        return self._clock()


#: This process's watch (pool processes, threads and the broker connection share it).
WATCH = OutOfMemoryWatch()


def report_outages(client: redis.Redis, events_stream: str, watch: OutOfMemoryWatch = WATCH) -> int:
    """Write one ``sched.redis.out_of_memory`` event per closed outage; returns how many.

    An outage whose event cannot be written (Redis refuses again, or is
    unreachable) stays pending for the next call.
    """
    closed = watch.take_closed()
    for position, outage in enumerate(closed):
        try:
            append_event(client, events_stream, "sched.redis.out_of_memory", outage.event_data())
        except redis.RedisError:
            watch.give_back(closed[position:])
            return position
    return len(closed)
