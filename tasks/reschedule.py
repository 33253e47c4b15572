"""Cluster events: apply the change, then its follow-up (wake, reschedule, expire).

``gpusched.cluster_event`` takes one JSON event (:mod:`tasks.cluster_events`
lists the kinds); every kind is applied by one Lua script, which in the same
atomic step updates the worker's outage clocks (:mod:`tasks.timers`), bumps
the wake epoch if the change can unblock parked requests, and records the
change's follow-up work under its event id:

* reschedule the gpusched bookings it released (a new request per booking,
  :func:`reschedule_released`);
* expire the records of released requests (the dedupe window starts);
* wake the parked requests the change could unblock (:mod:`tasks.parking`).

The caller runs the follow-up at once (:func:`run_followup`) and deletes it.
If the caller dies first, or the script's reply was lost and redis-py's retry
found nothing left to change, or the event is redelivered after it was
applied, the follow-up is still there: the drainer runs it once it is due
(``outbox_lease_s``). Every part is idempotent: a booking is rescheduled
once (the new request records which booking it replaces), expiring twice is
harmless, and waking only moves requests still parked at the seq it saw.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
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
from tasks.cluster_store import Released, json_list, released_items, row_json
from tasks.edge import sha256_hex
from tasks.fold import InvalidField, SnapshotRows, parse_snapshot
from tasks.parking import Change, describe, wake_targets, worker_changes
from tasks.pipeline import enqueue, lease_ms
from tasks.runtime import Runtime
from tasks.streams import append_event, dumps

#: Compare-and-set attempts for a worker update racing other updates of that worker.
MAX_CAS_ATTEMPTS = 8

WorkerEvent = WorkerUpsertEvent | WorkerStateEvent | GpuMemoryEvent | WorkerLabelsEvent


# ------------------------------------------------------------------- entry
def handle_cluster_event(rt: Runtime, raw: Any) -> dict[str, Any]:
    """Apply one cluster event; never raises on bad input (it is logged as rejected).

    Returns:
        A summary: ``{"kind", "status", "version", "woken", "rescheduled"}``;
        ``status`` is ``applied``/``removed``/``released``, ``unchanged`` (a
        worker event that changes nothing, e.g. redelivered), ``absent``,
        ``unknown_worker`` or ``rejected`` (with ``error`` and ``field``).
    """
    try:
        event = EVENT_ADAPTER.validate_python(raw)
        rows = parse_snapshot(event.model_dump(mode="json")) if isinstance(event, SnapshotEvent) else None
        key = event.key() if isinstance(event, InstanceDeletedEvent) else None
    except (ValidationError, InvalidField) as error:
        return _reject(rt, raw, error)
    if rows is not None:
        return apply_snapshot(rt, rows)
    if key is not None:
        return delete_instance(rt, key)
    if isinstance(event, WorkerRemovedEvent):
        return remove_worker(rt, event.worker_id, "worker_removed")
    assert not isinstance(event, SnapshotEvent | InstanceDeletedEvent)
    try:
        return update_worker(rt, event)
    except InvalidField as error:  # the event does not fit the worker: nothing was written
        return _reject(rt, raw, error)


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
    if isinstance(error, InvalidField):
        return error.field, error.message
    return None, str(error)


def _kind(raw: Any) -> str:
    return str(raw.get("kind")) if isinstance(raw, dict) else "?"


# ------------------------------------------------------------------ changes
def apply_snapshot(rt: Runtime, document: Mapping[str, Any] | SnapshotRows) -> dict[str, Any]:
    """Replace the cluster, reschedule bookings whose workers vanished, wake everything parked.

    Raises:
        pydantic.ValidationError / tasks.fold.InvalidField: invalid rows (nothing changes).
    """
    meta = rt.store.meta()
    applied = rt.cluster.apply_snapshot(document, meta=meta)
    done = run_followup(rt, meta.event_id)
    return {"kind": "snapshot", "status": "applied", "version": applied.version,
            "digest": applied.digest, **done}


def remove_worker(rt: Runtime, worker_id: int, reason: str) -> dict[str, Any]:
    """Remove a worker; its instances are released and rescheduled (idempotent)."""
    meta = rt.store.meta()
    version, _ = rt.cluster.remove_worker(worker_id, reason, meta=meta)
    done = run_followup(rt, meta.event_id)
    if version is None:
        return {"kind": "worker_removed", "status": "absent", **done}
    return {"kind": "worker_removed", "status": "removed", "version": version, **done}


def delete_instance(rt: Runtime, key: str) -> dict[str, Any]:
    """Release one instance's claims (idempotent) and wake what the freed GPUs could serve."""
    meta = rt.store.meta()
    version, _ = rt.cluster.release([key], "instance_deleted", wake="capacity_freed", meta=meta)
    done = run_followup(rt, meta.event_id)
    if version is None:
        return {"kind": "instance_deleted", "status": "absent", **done}
    return {"kind": "instance_deleted", "status": "released", "version": version, **done}


def update_worker(rt: Runtime, event: WorkerEvent) -> dict[str, Any]:
    """Apply a worker change with compare-and-set (clocks and wake follow in the same step).

    Raises:
        tasks.fold.InvalidField: the event does not fit the worker (nothing changes).
    """
    worker_id = event.worker.id if isinstance(event, WorkerUpsertEvent) else event.worker_id
    for _ in range(MAX_CAS_ATTEMPTS):
        current = rt.cluster.worker_row(worker_id)
        old = Worker.model_validate_json(current) if current is not None else None
        new = _updated(event, old)
        if new is None:
            return {"kind": event.kind, "status": "unknown_worker", "woken": [], "rescheduled": []}
        if current is not None and row_json(new) == current:
            return {"kind": event.kind, "status": "unchanged", "woken": [], "rescheduled": []}
        changes = worker_changes(old, new)
        meta = rt.store.meta()
        change = rt.cluster.upsert_worker(
            new, current, {"kind": event.kind, "changes": [c.kind for c in changes]},
            wake=[{"kind": c.kind, "workers": [w.id for w in c.workers]} for c in changes],
            meta=meta,
        )
        if change.status == "ok":
            done = run_followup(rt, meta.event_id)
            return {"kind": event.kind, "status": "applied", "version": change.version, **done}
    raise RuntimeError(f"worker {worker_id} kept changing during the update")


def _updated(event: WorkerEvent, old: Worker | None) -> Worker | None:
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
    """The worker with new GPU totals.

    Raises:
        InvalidField: a listed GPU is not one of the worker's (``gpus.<n>.index``).
    """
    row = worker.model_dump(mode="json")
    devices = (row.get("status") or {}).get("gpu_devices") or []
    for position, gpu in enumerate(gpus):
        matched = [
            device for device in devices
            if device.get("index") == gpu.index and gpu.type in (None, device.get("type"))
        ]
        if not matched:
            kind = f"{gpu.type} GPU" if gpu.type else "GPU"
            raise InvalidField(f"gpus.{position}.index",
                               f"worker {worker.id} has no {kind} with index {gpu.index}")
        for device in matched:
            device["memory"] = {**(device.get("memory") or {}), "total": gpu.total}
    return Worker.model_validate(row)


# ---------------------------------------------------------------- follow-up
def run_followup(rt: Runtime, followup_id: str) -> dict[str, list[str]]:
    """Do a cluster change's recorded follow-up work, then delete it (idempotent).

    Returns:
        ``{"woken": [...], "rescheduled": [...]}`` (empty if there was nothing to do).
    """
    raw = rt.client.hget(rt.keys.followup_jobs, followup_id)
    rescheduled: list[str] = []
    woken: list[str] = []
    if raw is not None:
        job = json.loads(raw)
        released = released_items(job.get("released"))
        if job.get("reschedule"):
            rescheduled = reschedule_released(rt, released, str(job.get("reason")))
        _expire_records(rt, released)
        woken = wake(rt, job.get("wake"))
    pipe = rt.client.pipeline(transaction=True)
    pipe.hdel(rt.keys.followup_jobs, followup_id)
    pipe.zrem(rt.keys.followups, followup_id)
    pipe.execute()
    return {"woken": woken, "rescheduled": rescheduled}


def _expire_records(rt: Runtime, released: Sequence[Released]) -> None:
    pipe = rt.client.pipeline(transaction=False)
    for item in released:
        if item.meta.request_id:
            pipe.expire(rt.keys.request(item.meta.request_id), rt.settings.request_ttl_s)
    pipe.execute()


def wake(rt: Runtime, facts: Any) -> list[str]:
    """Wake the parked requests a change could unblock and queue their new decisions.

    Args:
        facts: the change's wake-relevant facts, ``[{kind, workers: [ids]}]``
            (workers are read from the current cluster: one that is gone or
            no longer ready serves nobody).
    """
    facts = json_list(facts)
    if not facts:
        return []
    fold = rt.mirror.sync()
    changes = [
        Change(str(fact["kind"]),
               tuple(fold.workers[w] for w in json_list(fact.get("workers")) if w in fold.workers))
        for fact in facts
    ]
    targets = wake_targets(rt.store.parked(), changes)
    due = rt.store.now_ms() + lease_ms(rt)
    woken = rt.store.wake(targets, describe(changes), due)
    for request_id, seq in woken:
        enqueue(rt, request_id, seq, 0)
    return [request_id for request_id, _ in woken]


# --------------------------------------------------------------- reschedule
def reschedule_released(rt: Runtime, released: Sequence[Released], reason: str) -> list[str]:
    """Give every released gpusched booking a new request; report control-plane instances as lost.

    The new request id is ``<old request id>~<n>`` (n = how often it moved,
    or the next free number when a request already has that id), so the
    control plane can correlate; the new request waits parked if it fits
    nowhere (a pinned model waits for its own GPUs). Idempotent: the new
    request records the booking it replaces (``reschedule_of``), and a
    booking that already has one is not rescheduled again.
    """
    new_ids: list[str] = []
    for item in released:
        new_id = _reschedule_one(rt, item, reason)
        if new_id is not None:
            new_ids.append(new_id)
    return new_ids


def _reschedule_one(rt: Runtime, item: Released, reason: str) -> str | None:
    record = rt.store.record(item.meta.request_id) if item.meta.request_id else {}
    if item.meta.source != "gpusched" or not record.get("request"):
        append_event(rt.client, rt.keys.events, "sched.instance.lost",
                     {"instance_key": item.key, "workers": list(item.meta.workers), "reason": reason})
        return None
    old_id = str(item.meta.request_id)
    origin = f"{item.key}@{item.meta.order[0]}"
    moved = dumps({"instance_key": item.key, "from_request": old_id, "reason": reason,
                   "pinned": item.meta.pinned})
    for new_id in _successor_ids(old_id):
        state, replaces = rt.client.hmget(rt.keys.request(new_id), "state", "reschedule_of")
        if state is not None:
            if replaces == origin:
                return new_id  # an earlier run of this follow-up got this far
            continue  # the id is taken by another request
        request = _json_with_id(record["request"], new_id)
        accepted = rt.store.accept(
            new_id, request, sha256_hex(request), pinned=item.meta.pinned, reschedule_of=origin,
            rescheduled_data=moved, outbox_due_ms=rt.store.now_ms() + lease_ms(rt),
        )
        if accepted.accepted:
            enqueue(rt, new_id, 0, 0)
            return new_id
        if accepted.reschedule_of == origin:
            return new_id
    raise AssertionError("unreachable: the successor ids are endless")


def _successor_ids(request_id: str) -> Iterator[str]:
    base, _, moves = request_id.rpartition("~")
    if not (base and moves.isdigit()):
        base, moves = request_id, "0"
    return (f"{base}~{n}" for n in itertools.count(int(moves) + 1))


def _json_with_id(request_json: str, request_id: str) -> str:
    data = json.loads(request_json)
    data["request_id"] = request_id
    return canonical_json(data)
