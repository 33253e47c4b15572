"""Cluster events: apply the change, wake what it could unblock, reschedule what it lost.

``gpusched.cluster_event`` takes one JSON event (:mod:`tasks.cluster_events`
lists the kinds); every kind is applied by one Lua script, then the parked
requests the change could unblock are woken (:mod:`tasks.parking`).

Rescheduling and hysteresis. A worker that stops being ready starts an
outage clock (``down_since``); its instances are rescheduled only when the
clock reaches ``unreachable_grace_s`` while the worker is still not ready.
The clock is reset only after the worker has been ready for
``ready_stable_s`` without interruption, so a flapping worker accumulates its
outage instead of restarting the grace period on every blip, and no flap
moves anything before the grace period. When more than
``max_unreachable_fraction`` of the workers are down at once (a network
partition, GPUStack #5935), rescheduling is postponed. Pinned instances
(manual GPU selection) are never moved off their GPUs: they keep their claims
and wait; a removed worker's instances (pinned or not) get a new request,
which for a pinned model waits parked until its GPUs return. Instances the
control plane booked itself cannot be rescheduled here (the service has no
model for them): they are reported as ``sched.instance.lost``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from scheduler_core import Worker, canonical_json
from tasks.cluster_events import (
    EVENT_ADAPTER,
    KINDS,
    GpuMemory,
    GpuMemoryEvent,
    InstanceDeletedEvent,
    SnapshotEvent,
    WorkerLabelsEvent,
    WorkerRemovedEvent,
    WorkerStateEvent,
    WorkerUpsertEvent,
)
from tasks.cluster_store import Released
from tasks.health import Health, read_health, track_health
from tasks.parking import Change, describe, wake_targets, worker_changes
from tasks.pipeline import enqueue, lease_ms
from tasks.runtime import Runtime
from tasks.streams import append_event

#: Compare-and-set attempts for a worker update racing other updates of that worker.
MAX_CAS_ATTEMPTS = 8


# ------------------------------------------------------------------- entry
def handle_cluster_event(rt: Runtime, raw: Any) -> dict[str, Any]:
    """Apply one cluster event; never raises on bad input (it is logged as rejected).

    Returns:
        A summary: ``{"kind", "status", "version", "woken", "rescheduled"}``.
    """
    try:
        event = EVENT_ADAPTER.validate_python(raw)
        if isinstance(event, InstanceDeletedEvent):
            event.key()
    except (ValidationError, ValueError) as error:
        return _reject(rt, raw, error)
    if isinstance(event, SnapshotEvent):
        return apply_snapshot(rt, event.model_dump(mode="json"))
    if isinstance(event, WorkerRemovedEvent):
        return remove_worker(rt, event.worker_id, "worker_removed")
    if isinstance(event, InstanceDeletedEvent):
        return delete_instance(rt, event.key())
    return update_worker(rt, event)


def _reject(rt: Runtime, raw: Any, error: Exception) -> dict[str, Any]:
    field, message = _describe_error(error)
    append_event(
        rt.client, rt.keys.events, "sched.cluster.event_rejected",
        {"error": message, "field": field, "event": raw if isinstance(raw, dict) else repr(raw)},
    )
    return {"kind": _kind(raw), "status": "rejected", "error": message, "field": field}


def _describe_error(error: Exception) -> tuple[str | None, str]:
    if isinstance(error, ValidationError):
        first = error.errors(include_url=False)[0]
        loc = [str(part) for part in first["loc"]]
        if loc and loc[0] in KINDS:
            loc = loc[1:]
        return ".".join(loc) or None, str(first["msg"]).removeprefix("Value error, ")
    return None, str(error)


def _kind(raw: Any) -> str:
    return str(raw.get("kind")) if isinstance(raw, dict) else "?"


# ------------------------------------------------------------------ changes
def apply_snapshot(rt: Runtime, document: dict[str, Any]) -> dict[str, Any]:
    """Replace the cluster, reschedule bookings whose workers vanished, wake everything parked.

    Raises:
        pydantic.ValidationError / ValueError: invalid rows (nothing changes).
    """
    applied = rt.cluster.apply_snapshot(document)
    rescheduled = reschedule_released(rt, applied.dropped, "worker_gone_in_snapshot")
    woken = wake(rt, [Change("snapshot")])
    return {"kind": "snapshot", "status": "applied", "version": applied.version,
            "digest": applied.digest, "woken": woken, "rescheduled": rescheduled}


def remove_worker(rt: Runtime, worker_id: int, reason: str) -> dict[str, Any]:
    """Remove a worker; its instances are released and rescheduled (idempotent)."""
    version, released = rt.cluster.remove_worker(worker_id, reason)
    if version is None:
        return {"kind": "worker_removed", "status": "absent", "woken": [], "rescheduled": []}
    rescheduled = reschedule_released(rt, released, reason)
    return {"kind": "worker_removed", "status": "removed", "version": version,
            "woken": [], "rescheduled": rescheduled}


def delete_instance(rt: Runtime, key: str) -> dict[str, Any]:
    """Release one instance's claims (idempotent) and wake what the freed GPUs could serve."""
    version, released = rt.cluster.release([key], "instance_deleted")
    if version is None:
        return {"kind": "instance_deleted", "status": "absent", "woken": [], "rescheduled": []}
    _expire_records(rt, released)
    workers = _workers_of(rt, released)
    woken = wake(rt, [Change("capacity_freed", workers)])
    return {"kind": "instance_deleted", "status": "released", "version": version,
            "woken": woken, "rescheduled": []}


def update_worker(
    rt: Runtime, event: WorkerUpsertEvent | WorkerStateEvent | GpuMemoryEvent | WorkerLabelsEvent
) -> dict[str, Any]:
    """Apply a worker change with compare-and-set, then update health and wake."""
    for _ in range(MAX_CAS_ATTEMPTS):
        current = rt.cluster.worker_row(_worker_id(event))
        old = Worker.model_validate_json(current) if current is not None else None
        new = _updated(event, old)
        if new is None:
            return {"kind": event.kind, "status": "unknown_worker", "woken": [], "rescheduled": []}
        data = {"kind": event.kind, "changes": [c.kind for c in worker_changes(old, new)]}
        change = rt.cluster.upsert_worker(new, current, data)
        if change.status == "ok":
            track_health(rt, new.id, old.state if old else None, new.state)
            woken = wake(rt, worker_changes(old, new))
            return {"kind": event.kind, "status": "applied", "version": change.version,
                    "woken": woken, "rescheduled": []}
    raise RuntimeError(f"worker {_worker_id(event)} kept changing during the update")


def _worker_id(event: WorkerUpsertEvent | WorkerStateEvent | GpuMemoryEvent | WorkerLabelsEvent) -> int:
    return event.worker.id if isinstance(event, WorkerUpsertEvent) else event.worker_id


def _updated(
    event: WorkerUpsertEvent | WorkerStateEvent | GpuMemoryEvent | WorkerLabelsEvent,
    old: Worker | None,
) -> Worker | None:
    if isinstance(event, WorkerUpsertEvent):
        return event.worker
    if old is None:
        return None
    if isinstance(event, WorkerStateEvent):
        return old.model_copy(update={"state": event.state})
    if isinstance(event, WorkerLabelsEvent):
        return old.model_copy(update={"labels": dict(event.labels)})
    return _with_gpu_memory(old, event.gpus)


def _with_gpu_memory(worker: Worker, gpus: Sequence[GpuMemory]) -> Worker:
    row = worker.model_dump(mode="json")
    totals = {(g.type, g.index): g.total for g in gpus}
    devices = (row.get("status") or {}).get("gpu_devices") or []
    for device in devices:
        key = (device.get("type"), device.get("index"))
        if key in totals:
            device["memory"] = {**(device.get("memory") or {}), "total": totals[key]}
    return Worker.model_validate(row)


def _workers_of(rt: Runtime, released: Sequence[Released]) -> tuple[Worker, ...]:
    fold = rt.mirror.sync()
    ids = dict.fromkeys(w for item in released for w in item.meta.workers)
    return tuple(fold.workers[w] for w in ids if w in fold.workers)


def _expire_records(rt: Runtime, released: Sequence[Released]) -> None:
    pipe = rt.client.pipeline(transaction=False)
    for item in released:
        if item.meta.request_id:
            pipe.expire(rt.keys.request(item.meta.request_id), rt.settings.request_ttl_s)
    pipe.execute()


# --------------------------------------------------------------------- wake
def wake(rt: Runtime, changes: Sequence[Change]) -> list[str]:
    """Wake the parked requests ``changes`` could unblock and queue their new decisions."""
    if not changes:
        return []
    targets = wake_targets(rt.store.parked(), changes)
    due = rt.store.now_ms() + lease_ms(rt)
    woken = rt.store.wake(targets, describe(changes), due)
    for request_id, seq in woken:
        enqueue(rt, request_id, seq, 0)
    return [request_id for request_id, _ in woken]


# --------------------------------------------------------------- reschedule
def reschedule_released(rt: Runtime, released: Sequence[Released], reason: str) -> list[str]:
    """Give every released booking a new request; report control-plane instances as lost.

    The new request id is ``<old request id>~<n>`` (n = how often it moved), so
    the control plane can correlate; the new request waits parked if it fits
    nowhere (a pinned model waits for its own GPUs).
    """
    new_ids: list[str] = []
    for item in released:
        new_id = _reschedule_one(rt, item, reason)
        if new_id is not None:
            new_ids.append(new_id)
    _expire_records(rt, released)
    return new_ids


def _reschedule_one(rt: Runtime, item: Released, reason: str) -> str | None:
    record = rt.store.record(item.meta.request_id) if item.meta.request_id else {}
    if item.meta.source != "gpusched" or not record.get("request"):
        append_event(rt.client, rt.keys.events, "sched.instance.lost",
                     {"instance_key": item.key, "workers": list(item.meta.workers), "reason": reason})
        return None
    old_id = str(item.meta.request_id)
    base, _, moves = old_id.rpartition("~")
    new_id = f"{base}~{int(moves) + 1}" if base and moves.isdigit() else f"{old_id}~1"
    request = _json_with_id(record["request"], new_id)
    due = rt.store.now_ms() + lease_ms(rt)
    accepted = rt.store.accept(
        new_id, request, _sha(request), pinned=item.meta.pinned, reschedule_of=item.key,
        outbox_due_ms=due,
    )
    append_event(rt.client, rt.keys.events, "sched.instance.rescheduled",
                 {"instance_key": item.key, "from_request": old_id, "reason": reason,
                  "pinned": item.meta.pinned}, request_id=new_id)
    if accepted.accepted:
        enqueue(rt, new_id, 0, 0)
    return new_id


def _json_with_id(request_json: str, request_id: str) -> str:
    data = json.loads(request_json)
    data["request_id"] = request_id
    return canonical_json(data)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def fire_timer(rt: Runtime, member: str) -> dict[str, Any]:
    """Handle a due ``grace:<id>``, ``stable:<id>`` or ``retry:<request>|<seq>`` timer."""
    kind, _, raw_id = member.partition(":")
    if kind == "retry":
        return _fire_retry(rt, member, raw_id)
    worker_id = int(raw_id)
    fold = rt.mirror.sync()
    worker = fold.workers.get(worker_id)
    health = read_health(rt, worker_id)
    now = rt.store.now_ms()
    if worker is None:
        return {"timer": member, "action": "worker_gone"}
    if kind == "stable":
        return _fire_stable(rt, worker, health, now)
    return _fire_grace(rt, worker, health, now, fold.worker_list())


def _fire_retry(rt: Runtime, member: str, target: str) -> dict[str, Any]:
    request_id, _, seq = target.rpartition("|")
    due = rt.store.now_ms() + lease_ms(rt)
    woken = rt.store.wake([(request_id, int(seq))], {"by": [{"kind": "conflict_backoff"}]}, due)
    for woken_id, new_seq in woken:
        enqueue(rt, woken_id, new_seq, 0)
    return {"timer": member, "action": "woken" if woken else "stale"}


def _fire_stable(rt: Runtime, worker: Worker, health: Health, now: int) -> dict[str, Any]:
    stable_ms = int(rt.settings.ready_stable_s * 1000)
    if worker.state != "ready" or health.up_since_ms is None or now - health.up_since_ms < stable_ms:
        return {"timer": f"stable:{worker.id}", "action": "not_stable"}
    rt.client.hset(rt.keys.health, str(worker.id), Health(up_since_ms=health.up_since_ms).model_dump_json())
    rt.store.cancel_timer(f"grace:{worker.id}")
    return {"timer": f"stable:{worker.id}", "action": "recovered"}


def _fire_grace(
    rt: Runtime, worker: Worker, health: Health, now: int, workers: Sequence[Worker]
) -> dict[str, Any]:
    grace_ms = int(rt.settings.unreachable_grace_s * 1000)
    member = f"grace:{worker.id}"
    if worker.state == "ready" or health.down_since_ms is None:
        return {"timer": member, "action": "recovered"}
    if now < health.down_since_ms + grace_ms:
        rt.store.schedule_timer(member, health.down_since_ms + grace_ms)
        return {"timer": member, "action": "rearmed"}
    down = sum(1 for w in workers if w.state != "ready")
    if workers and down / len(workers) > rt.settings.max_unreachable_fraction:
        rt.store.schedule_timer(member, now + grace_ms)
        append_event(rt.client, rt.keys.events, "sched.reschedule.suspended",
                     {"worker_id": worker.id, "down": down, "workers": len(workers)})
        return {"timer": member, "action": "suspended"}
    return {"timer": member, "action": "rescheduled", "requests": lose_worker(rt, worker.id)}


def lose_worker(rt: Runtime, worker_id: int) -> list[str]:
    """Reschedule the unpinned gpusched instances of a worker that stayed down.

    Pinned instances keep their claims and wait for the worker. Control-plane
    instances stay in the ledger (the control plane owns them and will report
    their fate in its next snapshot); they are reported as ``sched.instance.lost``.
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
    _, released = rt.cluster.release(keys, "worker_lost")
    return reschedule_released(rt, released, "worker_lost")
