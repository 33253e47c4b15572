"""Worker outage clocks for the rescheduling hysteresis (see :mod:`tasks.reschedule`)."""

from __future__ import annotations

import redis
from pydantic import BaseModel

from tasks.runtime import Runtime
from tasks.streams import append_event


class Health(BaseModel):
    """A worker's outage clocks (ms since the epoch)."""

    down_since_ms: int | None = None
    up_since_ms: int | None = None


def read_health(rt: Runtime, worker_id: int) -> Health:
    """The worker's outage clocks."""
    raw = rt.client.hget(rt.keys.health, str(worker_id))
    return Health.model_validate_json(raw) if raw else Health()


def track_health(rt: Runtime, worker_id: int, old_state: str | None, new_state: str) -> None:
    """Update the outage clocks on a readiness change and arm the matching timer."""
    if old_state == new_state or (old_state is None and new_state == "ready"):
        return
    now = rt.store.now_ms()
    grace_ms = int(rt.settings.unreachable_grace_s * 1000)
    stable_ms = int(rt.settings.ready_stable_s * 1000)

    def update(pipe: redis.client.Pipeline) -> None:
        raw = pipe.hget(rt.keys.health, str(worker_id))
        health = Health.model_validate_json(raw) if raw else Health()
        pipe.multi()
        if new_state != "ready":
            health.down_since_ms = health.down_since_ms or now
            health.up_since_ms = None
            pipe.zadd(rt.keys.timers, {f"grace:{worker_id}": max(now, health.down_since_ms + grace_ms)})
            pipe.zrem(rt.keys.timers, f"stable:{worker_id}")
        else:
            health.up_since_ms = now
            if health.down_since_ms is not None:
                pipe.zadd(rt.keys.timers, {f"stable:{worker_id}": now + stable_ms})
        pipe.hset(rt.keys.health, str(worker_id), health.model_dump_json())

    rt.client.transaction(update, rt.keys.health)
    health = read_health(rt, worker_id)
    append_event(rt.client, rt.keys.events, "sched.worker.health",
                 {"worker_id": worker_id, "state": new_state, **health.model_dump()})
