"""Worker nodes announce themselves in ``gpusched:nodes`` and keep a heartbeat there.

On boot a node writes ``{pid, ready_ms, seen_ms, drained_ms}`` under its name
(what :meth:`tasks.edges.localrun.WorkerProcess.wait_ready` waits for),
refreshes it every :data:`HEARTBEAT_DRAIN_PASSES` drainer periods, and removes
itself on a warm shutdown. ``drained_ms`` is when its drainer last finished a
pass (:mod:`tasks.base.liveness`), so ``gpusched health`` can tell a node
whose drainer stopped.
"""

from __future__ import annotations

import json
import os

from tasks.base import liveness
from tasks.base.logging import get_logger
from tasks.runtime.middleware.base import Middleware, RuntimeFactory
from tasks.runtime.oom_watch import WATCH
from tasks.runtime.periodic import PeriodicThread
from tasks.state.context import Runtime
from tasks.state.outages import TRANSIENT_ERRORS

log = get_logger(__name__)

#: Drainer periods (``drain_interval_s``) between two heartbeats: about 5 s at the default.
HEARTBEAT_DRAIN_PASSES = 20


class NodeHeartbeat(Middleware):
    """Registers the node on boot, beats periodically, unregisters on shutdown."""

    def __init__(self) -> None:
        self._thread: PeriodicThread | None = None

    def after_worker_boot(self, node: str, runtime: RuntimeFactory) -> None:
        """Write the first beat, then beat on a thread of this process."""
        rt = runtime()
        ready_ms = rt.partition.now_ms()
        beat(rt, node, ready_ms)
        interval = rt.settings.drain_interval_s * HEARTBEAT_DRAIN_PASSES
        self._thread = PeriodicThread("gpusched-heartbeat", interval, lambda: beat(runtime(), node, ready_ms))
        self._thread.start()
        log.info("worker_node_ready", node=node)

    def before_worker_shutdown(self, node: str, runtime: RuntimeFactory) -> None:
        """Stop beating and remove the node (a Redis outage leaves it to go stale)."""
        if self._thread is not None:
            self._thread.stop()
        try:
            rt = runtime()
            rt.client.hdel(rt.keys.nodes, node)
        except TRANSIENT_ERRORS:
            log.warning("node_not_unregistered", node=node)


def beat(rt: Runtime, node: str, ready_ms: int) -> None:
    """Write the node's heartbeat (pid, ready time, now, the drainer's last finished pass).

    A beat is a write: once one goes through, an out-of-memory outage this
    process saw is over (:mod:`tasks.runtime.oom_watch`).
    """
    drained = liveness.last_pass(liveness.DRAINER)
    value = {
        "pid": os.getpid(), "ready_ms": ready_ms, "seen_ms": rt.partition.now_ms(),
        "drained_ms": int(drained * 1000) if drained is not None else None,
    }
    rt.client.hset(rt.keys.nodes, node, json.dumps(value))
    WATCH.accepted()
