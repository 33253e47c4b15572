"""Worker outage clocks for the rescheduling hysteresis (see :mod:`tasks.timers`).

The clocks are written by the Lua scripts that change a worker's row
(``worker_upsert``, ``cluster_apply``: ``track_health`` in ``lib.lua``), in
the same atomic step as the row, so a redelivered event or a snapshot cannot
skip a readiness transition; the timers read them here.
"""

from __future__ import annotations

from pydantic import BaseModel

from tasks.runtime import Runtime


class Health(BaseModel):
    """A worker's outage clocks (ms since the epoch)."""

    down_since_ms: int | None = None
    up_since_ms: int | None = None


def read_health(rt: Runtime, worker_id: int) -> Health:
    """The worker's outage clocks."""
    raw = rt.client.hget(rt.keys.health, str(worker_id))
    return Health.model_validate_json(raw) if raw else Health()
