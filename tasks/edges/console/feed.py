"""The live feed: one thread tails the audit stream and fans each event out to every open page.

However many pages are open, the console reads the audit stream once (one
blocking ``XREAD`` at a time, :data:`BLOCK_MS` long): :class:`FeedHub` keeps
the newest :data:`BACKLOG` events (a page that opens gets them first) and a
bounded queue per subscriber (a page that stops reading loses the oldest
events, never the console's memory). At most :data:`MAX_SUBSCRIBERS` pages
follow the feed at once.

Each event is sent as a small summary (id, time, type, request id, cluster
version and a one-line detail, :func:`tasks.edges.describe.event_detail`)
with its ``kind``: ``decision`` (a decision, its booking, publish, parking,
rejection, cancel, wake-up), ``cluster`` (a worker, an instance, a snapshot,
rescheduling) or ``other``.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, cast

import redis

from tasks.base.logging import get_logger
from tasks.edges.describe import event_detail

log = get_logger(__name__)

#: Longest block of one XREAD (the thread notices a stop within it).
BLOCK_MS = 1000
#: Events a newly opened page receives first.
BACKLOG = 50
#: Events waiting per subscriber before the oldest are dropped.
QUEUE_SIZE = 500
#: Pages following the feed at once (more are refused: 503).
MAX_SUBSCRIBERS = 32
#: Event types that are cluster changes (everything ``sched.worker.*`` / ``sched.instance.*`` too).
_CLUSTER = frozenset({"sched.cluster.applied", "sched.reschedule.suspended", "sched.reschedule.resumed",
                      "sched.ledger.overbooked", "sched.data.lost", "sched.data.recovered",
                      "sched.cluster.event_rejected"})


def kind_of(event_type: str) -> str:
    """``cluster``, ``decision`` or ``other``."""
    if event_type in _CLUSTER or event_type.startswith(("sched.worker.", "sched.instance.")):
        return "cluster"
    if event_type.startswith(("sched.decision.", "sched.request.", "sched.reservation.", "sched.result.")):
        return "decision"
    return "other"


def summarize(entry_id: str, fields: dict[str, str]) -> dict[str, Any]:
    """An audit entry as the feed sends it."""
    event_type = fields.get("type", "")
    try:
        data = json.loads(fields.get("data") or "{}")
        detail = event_detail(event_type, data if isinstance(data, dict) else {})
    except (ValueError, TypeError, KeyError, AttributeError):
        detail = ""
    return {"id": entry_id, "time": fields.get("time", ""), "type": event_type, "kind": kind_of(event_type),
            "request_id": fields.get("request_id") or "",
            "cluster_version": fields.get("cluster_version") or "", "detail": detail[:300]}


class Subscriber:
    """One page's queue (filled from the hub's thread, drained by the page's coroutine)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_SIZE)

    def offer(self, event: dict[str, Any]) -> None:
        """Queue ``event`` (called on the event loop); drop the oldest when full."""
        if self.queue.full():
            self.queue.get_nowait()
        self.queue.put_nowait(event)


class FeedHub:
    """Tails the audit stream on a thread of its own; pages subscribe to it."""

    def __init__(self, client_factory: Callable[[], redis.Redis], stream: str) -> None:
        self._client_factory = client_factory
        self._stream = stream
        self._lock = threading.Lock()
        self._subscribers: set[Subscriber] = set()
        self._backlog: deque[dict[str, Any]] = deque(maxlen=BACKLOG)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.connected = False

    def start(self) -> None:
        """Start tailing (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpusched-console-feed", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop tailing (within one block)."""
        self._stop.set()

    def subscribe(self, loop: asyncio.AbstractEventLoop) -> Subscriber | None:
        """A new subscriber that first gets the backlog; None when :data:`MAX_SUBSCRIBERS` follow already."""
        with self._lock:
            if len(self._subscribers) >= MAX_SUBSCRIBERS:
                return None
            subscriber = Subscriber(loop)
            for event in self._backlog:
                subscriber.offer(event)
            self._subscribers.add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        """Forget ``subscriber`` (its page closed)."""
        with self._lock:
            self._subscribers.discard(subscriber)

    def _publish(self, event: dict[str, Any]) -> None:
        with self._lock:
            self._backlog.append(event)
            subscribers = list(self._subscribers)
        for subscriber in subscribers:
            try:
                subscriber.loop.call_soon_threadsafe(subscriber.offer, event)
            except RuntimeError:  # its loop closed
                self.unsubscribe(subscriber)

    def _run(self) -> None:
        client: redis.Redis | None = None
        cursor: str | None = None
        while not self._stop.is_set():
            try:
                client = client or self._client_factory()
                cursor = cursor or self._prime(client)
                cursor = self._read(client, cursor)
                self.connected = True
            except (redis.RedisError, OSError) as error:
                if self.connected:
                    log.warning("console_feed_unavailable", error=f"{type(error).__name__}: {error}")
                self.connected = False
                client = None
                self._stop.wait(1.0)

    def _prime(self, client: redis.Redis) -> str:
        """Fill the backlog with the newest events; the id to read after."""
        newest = cast(list[tuple[str, dict[str, str]]],
                      list(reversed(client.xrevrange(self._stream, count=BACKLOG))))  # type: ignore[arg-type]
        for entry_id, fields in newest:
            self._publish(summarize(entry_id, fields))
        return str(newest[-1][0]) if newest else "0-0"

    def _read(self, client: redis.Redis, cursor: str) -> str:
        reply: Any = client.xread({self._stream: cursor}, count=200, block=BLOCK_MS)
        for _, entries in reply or []:
            for entry_id, fields in entries:
                cursor = str(entry_id)
                self._publish(summarize(cursor, fields))
        return cursor
