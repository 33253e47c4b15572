"""When each periodic job of this process last finished a pass (the drainer's liveness).

The drainer thread marks every successful pass; the node's heartbeat carries
the time (``drained_ms`` in ``gpusched:nodes``) and the node's ``/healthz``
checks its age (:mod:`tasks.runtime.health`). A thread that died, hangs, or
whose passes keep failing (Redis unreachable) stops being marked.
"""

from __future__ import annotations

import threading
import time

#: The drainer thread's name here.
DRAINER = "drainer"

_LOCK = threading.Lock()
_MARKS: dict[str, float] = {}


def mark(job: str) -> None:
    """``job`` just finished a pass (wall clock)."""
    with _LOCK:
        _MARKS[job] = time.time()


def last_pass(job: str) -> float | None:
    """When ``job`` last finished a pass (seconds since the epoch), None if never in this process."""
    with _LOCK:
        return _MARKS.get(job)
