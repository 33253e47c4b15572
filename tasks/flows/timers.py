"""The timers of ``gpusched:timers``: rescheduling hysteresis and conflict back-offs.

Rescheduling and hysteresis. A worker that stops being ready starts an
outage clock (``down_since``, written with its row by ``worker_upsert.lua``
or ``cluster_apply.lua``: ``track_health`` in ``lib.lua``, in the same atomic
step as the row, so a redelivered event or a snapshot cannot skip a
readiness transition; :class:`Health` reads them); its instances are
rescheduled only when the clock reaches ``unreachable_grace_s`` while the
worker is still not ready (``grace:<id>``). The clock is reset only after the
worker has been ready for ``ready_stable_s`` without interruption
(``stable:<id>``), so a flapping worker accumulates its outage instead of
restarting the grace period on every blip, and no flap moves anything before
the grace period. When more than ``max_unreachable_fraction`` of the workers
are down at once (a network partition, GPUStack #5935), rescheduling is
postponed; the results stream says so once (``reschedule_suspended``) and
again when it resumes (``reschedule_resumed``, :mod:`tasks.flows.notices`).
Pinned instances (manual GPU selection) are never moved off their
GPUs: they keep their claims and wait; a removed worker's instances (pinned
or not) get a new request, which for a pinned model waits parked until its
GPUs return. Instances the control plane booked itself cannot be rescheduled
here (the service has no model for them): they are reported as
``sched.instance.lost``.

``retry:<request>|<seq>`` wakes a request parked because its reservations
kept conflicting (armed by ``park.lua``).

Timers are leased by the drainer, so one may fire twice: each re-checks the
state it acts on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from pydantic import BaseModel

from scheduler_core import Worker
from tasks.base.events import append_event
from tasks.flows import metrics
from tasks.flows.enqueue import enqueue
from tasks.flows.followups import run_followup
from tasks.flows.notices import announce_suspension, rescheduling_suspended, resume_if_recovered
from tasks.flows.vanished import outage_share
from tasks.state.context import Runtime


class Health(BaseModel):
    """A worker's outage clocks (ms since the epoch)."""

    down_since_ms: int | None = None
    up_since_ms: int | None = None


def read_health(rt: Runtime, worker_id: int) -> Health:
    """The worker's outage clocks."""
    raw = rt.client.hget(rt.keys.health, str(worker_id))
    return Health.model_validate_json(raw) if raw else Health()


def fire_timer(rt: Runtime, member: str) -> dict[str, Any]:
    """Handle a due ``grace:<id>``, ``stable:<id>`` or ``retry:<request>|<seq>`` timer."""
    kind, _, raw_id = member.partition(":")
    if kind == "retry":
        return _fire_retry(rt, member, raw_id)
    worker_id = int(raw_id)
    fold = rt.mirror.sync()
    worker = fold.workers.get(worker_id)
    now = rt.partition.now_ms()
    if worker is None:
        return {"timer": member, "action": "worker_gone"}
    if kind == "stable":
        return _fire_stable(rt, worker, now)
    return _fire_grace(rt, worker, read_health(rt, worker_id), now, fold.worker_list())


def _fire_retry(rt: Runtime, member: str, target: str) -> dict[str, Any]:
    request_id, _, seq = target.rpartition("|")
    due = rt.partition.lease_deadline_ms()
    woken = rt.parked.wake([(request_id, int(seq))], {"by": [{"kind": "conflict_backoff"}]}, due)
    metrics.count_wakeups(len(woken))
    for woken_id, new_seq in woken:
        enqueue(rt, woken_id, new_seq, 0)
    return {"timer": member, "action": "woken" if woken else "stale"}


def _fire_stable(rt: Runtime, worker: Worker, now: int) -> dict[str, Any]:
    """Reset the outage clock of a worker ready for ``ready_stable_s`` (compare-and-set)."""
    stable_ms = int(rt.settings.ready_stable_s * 1000)
    field = str(worker.id)
    recovered: list[bool] = []

    def reset(pipe: redis.client.Pipeline) -> None:
        recovered.clear()  # a retried transaction decides again
        raw = pipe.hget(rt.keys.health, field)
        health = Health.model_validate_json(raw) if raw else Health()
        up = health.up_since_ms
        if worker.state != "ready" or up is None or now - up < stable_ms:
            return
        pipe.multi()
        pipe.hset(rt.keys.health, field, Health(up_since_ms=up).model_dump_json())
        pipe.zrem(rt.keys.timers, f"grace:{worker.id}")
        recovered.append(True)

    rt.client.transaction(reset, rt.keys.health)
    return {"timer": f"stable:{worker.id}", "action": "recovered" if recovered else "not_stable"}


def _fire_grace(
    rt: Runtime, worker: Worker, health: Health, now: int, workers: Sequence[Worker]
) -> dict[str, Any]:
    grace_ms = int(rt.settings.unreachable_grace_s * 1000)
    member = f"grace:{worker.id}"
    if worker.state == "ready" or health.down_since_ms is None:
        resume_if_recovered(rt)
        return {"timer": member, "action": "recovered"}
    if now < health.down_since_ms + grace_ms:
        rt.delays.schedule_timer(member, health.down_since_ms + grace_ms)
        return {"timer": member, "action": "rearmed"}
    if rescheduling_suspended(rt, workers):
        down, vanished, total = outage_share(rt, workers)
        rt.delays.schedule_timer(member, now + grace_ms)
        append_event(rt.client, rt.keys.events, "sched.reschedule.suspended",
                     {"worker_id": worker.id, "down": down, "vanished": vanished, "workers": total})
        announce_suspension(rt, workers, suspended=True)  # once per suspension, on the results stream
        return {"timer": member, "action": "suspended"}
    resume_if_recovered(rt)
    return {"timer": member, "action": "rescheduled", "requests": lose_worker(rt, worker.id)}


def lose_worker(rt: Runtime, worker_id: int) -> list[str]:
    """Reschedule the unpinned gpusched instances of a worker that stayed down.

    Pinned instances keep their claims and wait for the worker. Control-plane
    instances stay in the ledger (the control plane owns them and will report
    their fate in its next snapshot); they are reported as ``sched.instance.lost``.
    The release and its rescheduling follow-up are one step (``release.lua``).
    """
    on_worker = sorted(
        ((key, meta) for key, meta in rt.cluster.instance_meta().items() if worker_id in meta.workers),
        key=lambda item: item[1].order,
    )
    for key, meta in on_worker:
        if meta.source != "gpusched":
            append_event(rt.client, rt.keys.events, "sched.instance.lost",
                         {"instance_key": key, "workers": list(meta.workers), "reason": "worker_lost"})
    keys = [key for key, meta in on_worker if meta.source == "gpusched" and not meta.pinned]
    event = rt.partition.meta()
    rt.cluster.release(keys, "worker_lost", reschedule=True, meta=event)
    return run_followup(rt, event.event_id)["rescheduled"]
