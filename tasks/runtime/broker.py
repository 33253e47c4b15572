"""The broker transport: kombu's Redis transport, riding out a Redis that refuses writes.

kombu keeps every message a worker holds in Redis (``unacked`` and its
index) and writes there when it takes a message, acknowledges it or puts it
back — each a ``MULTI`` transaction, which Redis refuses as a whole while it
is at ``maxmemory`` (Redis 7 refuses any command queued in ``MULTI`` then).
Plain kombu lets that ``OutOfMemoryError`` escape the consumer loop: the
worker exits ("Unrecoverable error"), and a message it had just taken is
neither held nor queued any more.

:class:`Transport` is kombu's Redis transport with a :class:`RideOutQoS`
whose writes retry while Redis refuses them (back-off from
:data:`FIRST_BACKOFF_S` doubling to :data:`MAX_BACKOFF_S`), keeping the
message in hand: a message taken is recorded as held once Redis accepts
writes again, an acknowledgement or a requeue lands then. Nothing else
changes: reads, the ``BRPOP`` that takes a message and deletes work out of
memory. The consumer blocks meanwhile — the worker takes nothing new while
Redis cannot record it — and gives up only when the worker shuts down
(:func:`shutting_down`), leaving the message to kombu's visibility timeout
or, for one just taken, to the outbox watchdog (``stuck_after_s``). Each
outage is logged and reported by :mod:`tasks.runtime.oom_watch`.

:class:`RideOutChannel` is the base of the broker door's channel
(:mod:`tasks.runtime.broker_door`), the ``broker_transport`` of every Celery
app of the service (:func:`tasks.runtime.celery_app.celery_config`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kombu.transport import redis as kombu_redis

from tasks.runtime.oom_watch import WATCH
from tasks.state.outages import OUT_OF_MEMORY_CANDIDATES, is_out_of_memory

T = TypeVar("T")

#: First wait after a refused write (s); doubles on every refusal.
FIRST_BACKOFF_S = 0.05
#: Longest wait between two tries (s): a freed Redis is noticed within this.
MAX_BACKOFF_S = 2.0

_SHUTTING_DOWN = threading.Event()


def shutting_down() -> None:
    """The worker is shutting down: stop riding out (the refused write raises)."""
    _SHUTTING_DOWN.set()


def ride_out(
    action: Callable[[], T],
    where: str,
    *,
    sleep: Callable[[float], None] = time.sleep,
    stop: threading.Event = _SHUTTING_DOWN,
) -> T:
    """Run ``action`` until Redis accepts its writes; returns its value.

    Args:
        where: what is refused, for the alert (``broker ack``, ...).
        sleep, stop: the wait and the shutdown flag (tests pass their own).

    Raises:
        redis.exceptions.OutOfMemoryError: refused once ``stop`` is set (the worker shuts down).
    """
    delay = FIRST_BACKOFF_S
    while True:
        try:
            value = action()
        except OUT_OF_MEMORY_CANDIDATES as error:
            if not is_out_of_memory(error):
                raise
            WATCH.refused(where, error)
            if stop.is_set():
                raise
            sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF_S)
            continue
        WATCH.accepted()
        return value


class RideOutQoS(kombu_redis.QoS):
    """kombu's Redis QoS whose writes ride out an out-of-memory Redis."""

    def append(self, message: Any, delivery_tag: Any) -> None:
        """Record a message just taken as held (retried until Redis accepts it)."""
        ride_out(lambda: super(RideOutQoS, self).append(message, delivery_tag),  # type: ignore[no-untyped-call]
                 "broker take")

    def ack(self, delivery_tag: Any) -> None:
        """Acknowledge a message (retried until Redis accepts it)."""
        ride_out(lambda: super(RideOutQoS, self).ack(delivery_tag), "broker ack")  # type: ignore[no-untyped-call]

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        """Requeue or drop a message (retried until Redis accepts it)."""
        ride_out(lambda: super(RideOutQoS, self).reject(delivery_tag, requeue=requeue),  # type: ignore[no-untyped-call]
                 "broker requeue")

    def restore_visible(self, *args: Any, **kwargs: Any) -> None:
        """Restore messages held past the visibility timeout; skipped while Redis refuses writes."""
        try:
            super().restore_visible(*args, **kwargs)  # type: ignore[no-untyped-call]
        except OUT_OF_MEMORY_CANDIDATES as error:
            if not is_out_of_memory(error):
                raise
            WATCH.refused("broker restore", error)


class RideOutChannel(kombu_redis.Channel):
    """kombu's Redis channel with :class:`RideOutQoS`; a message says which queue it came from.

    A message's ``delivery_info`` is whatever its publisher wrote, so a message
    pushed onto ``gpusched.requests`` can claim any routing key. The consumer
    overwrites its routing key with the queue it was actually taken from, so
    the task sees where it came from (``request.delivery_info["routing_key"]``)
    and :mod:`tasks.runtime.middleware.queue_guard` can refuse a task that has
    no business on that queue.
    """

    QoS = RideOutQoS

    def basic_consume(self, queue: str, no_ack: bool, callback: Any, consumer_tag: str, **kwargs: Any) -> Any:
        """Consume from ``queue``; every message carries ``queue`` as its routing key."""

        def from_queue(message: Any) -> Any:
            message.delivery_info["routing_key"] = queue
            return callback(message)

        return super().basic_consume(queue, no_ack, from_queue, consumer_tag, **kwargs)  # type: ignore[no-untyped-call]
