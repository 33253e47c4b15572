"""The bridge process: one GPUStack server (one GPUStack cluster) and one gpusched partition.

Threads: one :class:`~tasks.edges.gpustack_bridge.follow.Follower` per kind of row, and in
place mode a reader of gpusched's results stream; they only put items on one queue. The
main loop is the only thread that changes anything: it applies re-syncs and events to the
mirror, then (place mode) syncs gpusched's cluster and reconciles the instances that
changed, or (shadow mode) compares GPUStack's decisions. Whatever fails — GPUStack or
Redis unreachable, a 5xx, a row that is refused — is logged and retried later with a
back-off; the loop never dies of it. A full pass over every instance runs every
:data:`FULL_PASS_S`, and cancels the requests of instances deleted while the bridge was down.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import redis
import structlog

from tasks.base.settings import Settings
from tasks.edges.client import ServiceClient
from tasks.edges.gpustack_bridge import metrics
from tasks.edges.gpustack_bridge.api import KINDS, GpustackApi, GpustackError, WatchEvent
from tasks.edges.gpustack_bridge.cluster_sync import ClusterSync
from tasks.edges.gpustack_bridge.follow import Change, Event, Follower, Mirror, Resync
from tasks.edges.gpustack_bridge.gpusched_side import GpuschedSide, live_request_ids
from tasks.edges.gpustack_bridge.ids import instance_of
from tasks.edges.gpustack_bridge.keys import BridgeKeys
from tasks.edges.gpustack_bridge.place import INSTANCES, Placer
from tasks.edges.gpustack_bridge.shadow import Shadow
from tasks.state.context import redis_client
from tasks.state.generation import DataLost
from tasks.state.streams import ACK_POLL_S, read_new

log = structlog.get_logger("gpusched.gpustack")
Mode = Literal["place", "shadow"]

#: Seconds between two full passes over every instance (the safety net of the event path).
FULL_PASS_S = 10.0
#: Retry back-off of one instance after a failure: first delay, cap.
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 30.0
#: Errors that mean "try again later", never a crash.
TRANSIENT = (GpustackError, redis.RedisError, DataLost, OSError)


@dataclass(frozen=True, slots=True)
class Poke:
    """gpusched published something for this instance's request."""

    instance_id: int


class PluginMissing(RuntimeError):
    """Place mode against a GPUStack whose own scheduler runs."""


@dataclass
class Bridge:
    api: GpustackApi
    client: ServiceClient
    settings: Settings
    cluster_id: int
    mode: Mode
    stop: threading.Event = field(default_factory=threading.Event)
    inbox: queue.Queue[Any] = field(default_factory=lambda: queue.Queue(maxsize=100_000))
    mirror: Mirror = field(default_factory=Mirror)
    synced: set[str] = field(default_factory=set)
    dirty: set[int] = field(default_factory=set)
    retry_at: dict[int, tuple[float, float]] = field(default_factory=dict)
    workers_dirty: bool = True
    last_full: float = 0.0

    def __post_init__(self) -> None:
        self.keys = BridgeKeys(self.client.rt.keys, self.cluster_id)
        self.side = GpuschedSide(self.client)
        roots = self.settings.model_roots
        self.placer = Placer(self.api, self.side, self.mirror.rows, self.cluster_id, self.keys, roots)
        self.cluster = ClusterSync(self.placer)
        self.shadow = Shadow(
            self.mirror.rows, self.cluster_id, self.client.rt.client, self.keys, roots, self.api
        )

    # ------------------------------------------------------------------ start
    def check_plugin(self) -> None:
        """Place mode needs GPUStack's scheduler off (the plugin says so); shadow mode needs it on.

        Raises:
            PluginMissing: place mode, and no plugin reports the external scheduler.
            GpustackError: the server could not be asked.
        """
        status = self.api.plugin_status()
        external = bool(status and status.get("external_scheduler"))
        if self.mode == "place" and not external:
            raise PluginMissing(
                f"GPUStack at {self.api.base_url} runs its own scheduler (no gpusched plugin reports "
                "external_scheduler at /gpusched/plugin): place mode would race it; install "
                "integrations/gpustack-plugin next to GPUStack and start it with "
                "GPUSCHED_GPUSTACK_EXTERNAL_SCHEDULER=1 (docs/gpustack.md)"
            )
        if self.mode == "shadow" and external:
            log.warning(
                "gpustack.shadow_without_scheduler",
                hint="GPUStack's scheduler is off: there are no decisions to compare",
            )

    def run(self) -> None:
        """Follow GPUStack until :attr:`stop` is set (SIGTERM/SIGINT set it)."""
        for kind in KINDS:
            Follower(self.api, kind, self.inbox, self.stop).start()
        if self.mode == "place":
            threading.Thread(target=self._read_results, name="gpusched-results", daemon=True).start()
        log.info(
            "gpustack.bridge_started", server=self.api.base_url, cluster_id=self.cluster_id, mode=self.mode
        )
        while not self.stop.is_set():
            self.step(timeout=0.5)
        log.info("gpustack.bridge_stopped")

    def install_signals(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop.set())

    # ------------------------------------------------------------------ the loop
    def step(self, timeout: float) -> None:
        """Handle what arrived (at most a batch), then act on it."""
        try:
            items = [self.inbox.get(timeout=timeout)]
        except queue.Empty:
            items = []
        while len(items) < 1000:
            try:
                items.append(self.inbox.get_nowait())
            except queue.Empty:
                break
        for item in items:
            try:
                self._take(item)
            except Exception as error:  # a bug must not stop the bridge; the full pass repairs
                log.error(
                    "gpustack.event_failed",
                    item=type(item).__name__,
                    error=f"{type(error).__name__}: {error}",
                )
        metrics.UP.set(1 if self.synced == set(KINDS) else 0)
        if self.mode == "place" and self.synced == set(KINDS):
            self._act()

    def _take(self, item: Any) -> None:
        if isinstance(item, Resync):
            if item.kind not in self.synced and len(self.synced) == len(KINDS) - 1:
                log.info(
                    "gpustack.synced",
                    workers=len(self.mirror.rows["workers"]) + 0,
                    models=len(self.mirror.rows["models"]),
                    instances=len(self.mirror.rows[INSTANCES]),
                )
            self.synced.add(item.kind)
            metrics.RECONNECTS.labels(item.kind).inc()
            for change in self.mirror.resync(item.kind, item.rows):
                self._changed(change)
            self.last_full = 0.0  # a reconnect: reconcile everything soon
        elif isinstance(item, Event):
            if self.mode == "shadow" and item.kind == INSTANCES and self.synced == set(KINDS):
                self._shadow(item.event)
            applied = self.mirror.apply(item.kind, item.event)
            if applied is not None:
                self._changed(applied)
        elif isinstance(item, Poke):
            self.dirty.add(item.instance_id)

    def _shadow(self, event: WatchEvent) -> None:
        before = self.mirror.rows[INSTANCES].get(event.row.get("id"))  # type: ignore[arg-type]
        try:
            self.shadow.observe(before, event)
        except TRANSIENT as error:
            log.warning("gpustack.shadow_failed", error=f"{type(error).__name__}: {error}")
        except Exception as error:  # a bug must not stop the bridge: say so loudly
            log.error("gpustack.shadow_error", error=f"{type(error).__name__}: {error}")

    def _changed(self, change: Change) -> None:
        if change.kind == "workers":
            self.workers_dirty = True
        elif change.kind == INSTANCES:
            self.workers_dirty = True  # the foreign instances may have changed
            if change.after is None and change.before is not None and self.mode == "place":
                gone = change.before
                self._guard(change.id, lambda: self.placer.deleted(gone))
            self.dirty.add(change.id)
        elif change.kind == "models":
            self.dirty.update(
                i for i, row in self.mirror.rows[INSTANCES].items() if row.get("model_id") == change.id
            )

    def _act(self) -> None:
        now = time.monotonic()
        if now - self.last_full >= FULL_PASS_S:
            self.last_full = now
            self.workers_dirty = True
            self.dirty.update(self.mirror.rows[INSTANCES])
            self._guard(-1, self._forget_deleted)
        if self.workers_dirty and self._guard(-1, self.cluster.sync):
            self.workers_dirty = False
        due = {i for i, (at, _) in self.retry_at.items() if at <= now}
        for ident in sorted(self.dirty | due):
            self.dirty.discard(ident)
            self._guard(ident, lambda ident=ident: self.placer.reconcile(ident))

    def _guard(self, ident: int, action: Any) -> bool:
        """Run ``action``; on failure log it and retry ``ident`` later (doubling back-off)."""
        try:
            action()
        except TRANSIENT as error:
            self._later(ident, f"{type(error).__name__}: {error}", transient=True)
            return False
        except Exception as error:  # never a crash: a bug is logged and retried like a fault
            self._later(ident, f"{type(error).__name__}: {error}", transient=False)
            return False
        self.retry_at.pop(ident, None)
        return True

    def _later(self, ident: int, error: str, *, transient: bool) -> None:
        _, delay = self.retry_at.get(ident, (0.0, RETRY_FIRST_S / 2))
        delay = min(delay * 2, RETRY_MAX_S)
        self.retry_at[ident] = (time.monotonic() + delay, delay)
        metrics.WRITE_ERRORS.labels("transient" if transient else "bug").inc()
        (log.warning if transient else log.error)(
            "gpustack.retry_later", instance=ident, error=error, retry_in_s=delay
        )

    def _forget_deleted(self) -> None:
        """Cancel requests whose instance no longer exists (deleted while the bridge was down)."""
        present = set(self.mirror.rows[INSTANCES])
        for rid in sorted(live_request_ids(self.side)):
            ident = instance_of(rid, self.cluster_id)
            if ident is not None and ident not in present:
                status = self.side.cancel(rid)
                metrics.CANCELLED.inc()
                log.info("gpustack.instance_gone", instance=ident, request_id=rid, cancel=status)

    # ------------------------------------------------------------------ results
    def _read_results(self) -> None:
        """Poke the instance of every result gpusched publishes (a wake-up only; records decide),
        once a replica holds it: an entry above the acknowledged position is read again after
        :data:`~tasks.state.streams.ACK_POLL_S` (the reconcile it wakes acts only on acknowledged
        results, :mod:`~tasks.edges.gpustack_bridge.gpusched_side`)."""
        reader = redis_client(self.settings, blocking=True, max_block_ms=1000)
        cursor = "$"
        while not self.stop.is_set():
            try:
                if cursor == "$":
                    cursor = self.client.last_result_id()
                entries = read_new(reader, self.client.rt.keys.results, cursor, count=500, block_ms=1000)
                shown = self.client.acknowledged_entries(entries)
                for entry_id, fields in shown:
                    cursor = entry_id
                    ident = instance_of(str(fields.get("request_id", "")), self.cluster_id)
                    if ident is not None:
                        self.inbox.put(Poke(ident))
                if len(shown) < len(entries):
                    self.stop.wait(ACK_POLL_S)
            except redis.RedisError as error:
                log.warning("gpustack.results_unreadable", error=str(error))
                self.stop.wait(1.0)
