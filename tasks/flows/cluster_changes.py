"""Cluster events: validate, apply the change, then run its follow-up.

``gpusched.cluster_event`` takes one JSON event
(:mod:`tasks.intake.cluster_events` lists the kinds); every kind is applied
by one Lua script (:mod:`tasks.state.cluster_store`), which in the same
atomic step updates the worker's outage clocks (:mod:`tasks.flows.timers`),
bumps the wake epoch if the change can unblock parked requests, and records
the change's follow-up work under its event id. The caller then runs the
follow-up at once (:func:`tasks.flows.followups.run_followup`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from scheduler_core import Worker, render_text, render_value
from tasks.base.events import append_event
from tasks.base.rows import row_json
from tasks.flows.cancels import CANCELLED, RELEASED, cancel_request
from tasks.flows.followups import run_followup
from tasks.flows.notices import resume_if_recovered
from tasks.intake.cluster_events import (
    KINDS,
    GpuMemory,
    GpuMemoryEvent,
    InstanceDeletedEvent,
    RequestCancelledEvent,
    SnapshotEvent,
    WorkerLabelsEvent,
    WorkerRemovedEvent,
    WorkerStateEvent,
    WorkerUpsertEvent,
    parse_event,
)
from tasks.intake.limits import IntakeLimits
from tasks.intake.snapshots import InvalidField, SnapshotRows, parse_snapshot
from tasks.state.cluster_store import RemovalRefused
from tasks.state.context import Runtime
from tasks.state.parking import snapshot_facts, worker_changes

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
        event = parse_event(raw, IntakeLimits.of(rt.settings))
        rows = parse_snapshot(event.model_dump(mode="json")) if isinstance(event, SnapshotEvent) else None
        key = event.key() if isinstance(event, InstanceDeletedEvent) else None
    except (ValidationError, InvalidField) as error:
        return _reject(rt, raw, error)
    if rows is not None:
        assert isinstance(event, SnapshotEvent)
        try:
            return apply_snapshot(rt, rows, allow_removal=event.allow_removal)
        except RemovalRefused as error:  # nothing was written
            return _reject(rt, raw, error)
    if isinstance(event, RequestCancelledEvent):
        return {"kind": event.kind, **cancel_request(rt, event.request_id, by="cluster_event")}
    if isinstance(event, InstanceDeletedEvent) and event.request_id and not event.instance_key \
            and event.instance_id is None:
        return delete_request_instance(rt, event.request_id)
    if key is not None:
        return delete_instance(rt, key)
    if isinstance(event, WorkerRemovedEvent):
        return remove_worker(rt, event.worker_id, "worker_removed")
    assert not isinstance(event, SnapshotEvent | InstanceDeletedEvent | RequestCancelledEvent)
    try:
        return update_worker(rt, event)
    except InvalidField as error:  # the event does not fit the worker: nothing was written
        return _reject(rt, raw, error)


def _reject(rt: Runtime, raw: Any, error: Exception) -> dict[str, Any]:
    field, message = _describe_error(error)
    echoed = render_value(raw) if isinstance(raw, dict) else repr(raw)  # the refused input, as data
    append_event(
        rt.client, rt.keys.events, "sched.cluster.event_rejected",
        {"error": message, "field": field, "event": echoed},
    )
    return {"kind": _kind(raw), "status": "rejected", "error": message, "field": field}


def _describe_error(error: Exception) -> tuple[str | None, str]:
    if isinstance(error, ValidationError):
        first = error.errors(include_url=False)[0]
        loc = [str(part) for part in first["loc"]]
        if loc and loc[0] in KINDS:
            loc = loc[1:]
        field = ".".join(loc) or None
        message = str(first["msg"]).removeprefix("Value error, ")
        return None if field is None else render_text(field), render_text(message)
    if isinstance(error, InvalidField):
        return error.field, error.message
    return None, render_text(str(error))


def _kind(raw: Any) -> str:
    return render_text(str(raw.get("kind"))) if isinstance(raw, dict) else "?"


# ------------------------------------------------------------------ changes
def apply_snapshot(
    rt: Runtime, document: Mapping[str, Any] | SnapshotRows, *, allow_removal: bool = False
) -> dict[str, Any]:
    """Replace the cluster, reschedule bookings whose workers vanished, wake what its changes
    could unblock (the workers' changes against the stored rows, the capacity it frees: an
    unchanged snapshot wakes nobody).

    Args:
        allow_removal: confirm a snapshot that removes more than
            ``max_removed_fraction`` of the workers.

    Raises:
        pydantic.ValidationError / tasks.intake.snapshots.InvalidField: invalid rows (nothing changes).
        tasks.state.cluster_store.RemovalRefused: too many workers would go (nothing changes).
    """
    meta = rt.partition.meta()
    rows = document if isinstance(document, SnapshotRows) else parse_snapshot(document)
    version, stored = rt.cluster.worker_rows()
    applied = rt.cluster.apply_snapshot(rows, meta=meta, allow_removal=allow_removal,
                                        wake=snapshot_facts(stored, rows.workers), wake_version=version)
    done = run_followup(rt, meta.event_id)
    resume_if_recovered(rt)
    return {"kind": "snapshot", "status": "applied", "version": applied.version,
            "digest": applied.digest, **done}


def remove_worker(rt: Runtime, worker_id: int, reason: str) -> dict[str, Any]:
    """Remove a worker; its instances are released and rescheduled (idempotent)."""
    meta = rt.partition.meta()
    version, _ = rt.cluster.remove_worker(worker_id, reason, meta=meta)
    done = run_followup(rt, meta.event_id)
    resume_if_recovered(rt)
    if version is None:
        return {"kind": "worker_removed", "status": "absent", **done}
    return {"kind": "worker_removed", "status": "removed", "version": version, **done}


def delete_instance(rt: Runtime, key: str) -> dict[str, Any]:
    """Release one instance's claims (idempotent) and wake what the freed GPUs could serve."""
    meta = rt.partition.meta()
    version, _ = rt.cluster.release([key], "instance_deleted", wake="capacity_freed", meta=meta)
    done = run_followup(rt, meta.event_id)
    if version is None:
        return {"kind": "instance_deleted", "status": "absent", **done}
    return {"kind": "instance_deleted", "status": "released", "version": version, **done}


def delete_request_instance(rt: Runtime, request_id: str) -> dict[str, Any]:
    """The instance of a gpusched request is gone: release its booking, or withdraw the request
    if it is not placed yet (queued, parked, retrying: it must never book afterwards)."""
    outcome = cancel_request(rt, request_id, by="instance_deleted")
    status = outcome["status"] if outcome["status"] in (CANCELLED, RELEASED) else "absent"
    summary = {"kind": "instance_deleted", "status": status, "woken": outcome.get("woken", []),
               "rescheduled": [], "request_id": request_id}
    if "version" in outcome:
        summary["version"] = outcome["version"]
    return summary


def update_worker(rt: Runtime, event: WorkerEvent) -> dict[str, Any]:
    """Apply a worker change with compare-and-set (clocks and wake follow in the same step).

    Raises:
        tasks.intake.snapshots.InvalidField: the event does not fit the worker (nothing changes).
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
        meta = rt.partition.meta()
        change = rt.cluster.upsert_worker(
            new, current, {"kind": event.kind, "changes": [c.kind for c in changes]},
            wake=[{"kind": c.kind, "workers": [w.id for w in c.workers]} for c in changes],
            meta=meta,
        )
        if change.status == "ok":
            done = run_followup(rt, meta.event_id)
            resume_if_recovered(rt)
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
