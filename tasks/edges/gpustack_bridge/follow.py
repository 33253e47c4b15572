"""Following GPUStack: list, then watch, each of workers, models and instances; reconnect and re-sync.

One :class:`Follower` thread per kind connects the watch, lists the rows on a second
connection right after the watch answered, and hands both to the bridge's queue: first a
:class:`Resync` with the listed rows, then every watch event. GPUStack's watch replays
every row on connect and has no resume token, so nothing is lost across a reconnect: the
list says what exists (rows the mirror holds but the list lacks were deleted meanwhile), and
the stream carries every change from the moment it connected. :class:`Mirror` applies both
in order and skips a replayed row older than the one it holds (``updated_at``).

A cut stream (the server restarting, a proxy's timeout, no heartbeat for
``WATCH_IDLE_S``) is reconnected after a back-off that doubles from 0.5 s to 15 s, with a
jitter seeded from the kind so runs are reproducible; it resets once a stream stays up.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from tasks.edges.gpustack_bridge.api import GpustackApi, GpustackError, WatchEvent
from tasks.edges.gpustack_bridge.rows import REDUCERS, RowRefused, row_id

log = structlog.get_logger("gpusched.gpustack")

Row = dict[str, Any]
#: Reconnect back-off: first delay, cap (seconds).
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 15.0
#: A stream that stayed up this long resets the back-off.
STABLE_S = 30.0
CREATED, UPDATED, DELETED = 1, 2, 3


@dataclass(frozen=True, slots=True)
class Resync:
    """Every row of ``kind`` as listed right after a (re)connect."""

    kind: str
    rows: list[Row]


@dataclass(frozen=True, slots=True)
class Event:
    kind: str
    event: WatchEvent


@dataclass(frozen=True, slots=True)
class Change:
    """What one event or re-sync did to one row (``before``/``after`` None: absent)."""

    kind: str
    id: int
    before: Row | None
    after: Row | None
    live: bool = False  # an update GPUStack made while we watched (not a replay or re-sync)
    changed: frozenset[str] = frozenset()


def _updated(row: Row) -> datetime | None:
    text = row.get("updated_at")
    if not isinstance(text, str):
        return None
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)  # GPUStack writes UTC


@dataclass
class Mirror:
    """The rows GPUStack last showed, reduced and validated, by kind and id."""

    rows: dict[str, dict[int, Row]] = field(default_factory=lambda: {kind: {} for kind in REDUCERS})
    updated: dict[tuple[str, int], datetime] = field(default_factory=dict)
    refused: int = 0

    def _reduce(self, kind: str, raw: Row) -> Row | None:
        try:
            return REDUCERS[kind](raw)
        except RowRefused as error:
            self.refused += 1
            log.warning("gpustack.row_refused", kind=kind, field=error.field, error=str(error))
            return None

    def resync(self, kind: str, listed: list[Row]) -> list[Change]:
        """Replace ``kind``'s rows with ``listed``; the changes, in id order."""
        fresh: dict[int, Row] = {}
        stamps: dict[int, datetime | None] = {}
        for raw in listed:
            reduced = self._reduce(kind, raw)
            if reduced is not None:
                fresh[reduced["id"]] = reduced
                stamps[reduced["id"]] = _updated(raw)
        held = self.rows[kind]
        changes = [
            Change(kind, i, held.get(i), fresh.get(i))
            for i in sorted(set(held) | set(fresh))
            if held.get(i) != fresh.get(i)
        ]
        self.rows[kind] = fresh
        for i, stamp in stamps.items():
            if stamp is not None:
                self.updated[(kind, i)] = stamp
        return changes

    def apply(self, kind: str, event: WatchEvent) -> Change | None:
        """Apply one watch event; the change it made (None when it changed nothing)."""
        try:
            ident = row_id(event.row, kind)
        except RowRefused:
            self.refused += 1
            return None
        held = self.rows[kind].get(ident)
        if event.type == DELETED:
            self.rows[kind].pop(ident, None)
            self.updated.pop((kind, ident), None)
            return Change(kind, ident, held, None) if held is not None else None
        stamp = _updated(event.row)
        known = self.updated.get((kind, ident))
        if event.type == CREATED and known is not None and stamp is not None and stamp < known:
            return None  # a replayed row older than the one listed
        reduced = self._reduce(kind, event.row)
        if reduced is None:
            return None
        self.rows[kind][ident] = reduced
        if stamp is not None:
            self.updated[(kind, ident)] = stamp
        if reduced == held:
            return None
        return Change(
            kind,
            ident,
            held,
            reduced,
            live=event.type == UPDATED,
            changed=frozenset(str(k) for k in event.changed),
        )


class Follower(threading.Thread):
    """Follows one kind of rows into ``sink`` until ``stop`` is set."""

    def __init__(self, api: GpustackApi, kind: str, sink: queue.Queue[Any], stop: threading.Event) -> None:
        super().__init__(name=f"gpustack-watch-{kind}", daemon=True)
        self.api, self.kind, self.sink, self.stop_event = api, kind, sink, stop
        self.connects = 0
        self._rng = random.Random(kind)  # seeded: reproducible jitter

    def run(self) -> None:
        delay = BACKOFF_FIRST_S
        while not self.stop_event.is_set():
            started = time.monotonic()
            try:
                self._follow_once()
            except GpustackError as error:
                log.warning("gpustack.watch_cut", kind=self.kind, error=str(error))
            except Exception as error:  # never let a watcher die: reconnect after the back-off
                log.error("gpustack.watch_failed", kind=self.kind, error=f"{type(error).__name__}: {error}")
            if time.monotonic() - started > STABLE_S:
                delay = BACKOFF_FIRST_S
            self.stop_event.wait(delay * (1 + self._rng.random() / 2))
            delay = min(delay * 2, BACKOFF_MAX_S)

    def _follow_once(self) -> None:
        events = self.api.watch(self.kind, self.stop_event)
        next(events)  # OPENED: from here on the stream holds every change
        rows = self.api.list_rows(self.kind)
        self.connects += 1
        self.sink.put(Resync(self.kind, rows))
        for event in events:
            self.sink.put(Event(self.kind, event))
        log.info("gpustack.watch_ended", kind=self.kind)
