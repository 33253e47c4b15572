"""Recovering from a Redis that lost the service's data, and the export that makes it complete.

When the data generation check (:mod:`tasks.state.generation`) finds Redis
wiped, replaced or rolled back, the service stops deciding until an operator
recovers it with the truth from outside Redis:

* the control plane's snapshot of the cluster — every worker and every
  instance it runs (``{"workers": [...], "model_instances": [...]}``);
* gpusched's own bookings, so that they are bookings again (movable when a
  worker is lost, releasable by request id, answering ``duplicate`` when the
  client resubmits them): ``"bookings": [{"request_id", "request", "instance",
  "result"?}]`` in the same document — what :func:`export_state` writes
  (``gpusched cluster export``, taken regularly), or what a control plane
  builds from the requests it sent and the ``scheduled`` results it read.

:func:`recover` (``gpusched cluster apply FILE --recover``) keeps every worker
paused (the loss marker stays, or is set, while it works), replaces the
cluster with the snapshot — every booking Redis still holds is taken over,
none rescheduled —, re-creates each booking with its done record
(``restore_booking.lua``), writes a new generation that supersedes the ones
the workers know, removes the marker, logs ``sched.data.recovered`` and wakes
every parked request. Clients then resubmit every request they have no
terminal result for: a restored booking answers ``duplicate`` (done), the
rest are decided against the recovered cluster.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from scheduler_core import ModelInstance
from tasks.base.events import append_event, dumps, utc_now_iso
from tasks.base.logging import get_logger
from tasks.base.rows import InstanceMeta, booked_instance_key, parse_meta, row_json
from tasks.flows.followups import run_followup
from tasks.intake.limits import IntakeLimits
from tasks.intake.requests import Normalized, error_of, normalize
from tasks.intake.snapshots import InvalidField, SnapshotRows, parse_snapshot
from tasks.state.cluster_store import Booking
from tasks.state.context import Runtime
from tasks.state.generation import generation_id
from tasks.state.ledger import encode_amounts, instance_claims, occupied_workers, worker_gpu_types

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class RestoredBooking:
    """One validated booking of a recovery document."""

    request: Normalized
    instance: ModelInstance
    result_json: str


# -------------------------------------------------------------------- export
def export_state(rt: Runtime) -> dict[str, Any]:
    """The cluster as a recovery document: workers, the control plane's instances, gpusched's bookings.

    Read from one atomic read of the cluster hashes, then each booking's
    record (its request and published result). ``exported`` says when
    (``time``, UTC ISO 8601), at which ``cluster_version``, and under which
    data ``generation`` — the id Redis holds, read as it is (an export
    never writes one; ``None`` before any worker wrote the first), so a
    fresh process (``gpusched cluster export``) names it too.
    """
    generation = generation_id(rt.client.get(rt.keys.generation))
    version, _, workers, instances, metas = rt.cluster.read_state()
    ordered = sorted(
        ((key, parse_meta(metas[key])) for key in instances if key in metas), key=lambda item: item[1].order
    )
    bookings = [
        _exported_booking(rt, meta.request_id, instances[key])
        for key, meta in ordered if meta.source == "gpusched" and meta.request_id
    ]
    return {
        "workers": [json.loads(workers[wid]) for wid in sorted(workers, key=int)],
        "model_instances": [json.loads(instances[key]) for key, meta in ordered if meta.source != "gpusched"],
        "bookings": [booking for booking in bookings if booking is not None],
        "exported": {"time": utc_now_iso(), "cluster_version": version,
                     "generation": generation},
    }


def _exported_booking(rt: Runtime, request_id: str, row: str) -> dict[str, Any] | None:
    request_json, result_json = rt.client.hmget(rt.keys.request(request_id), "request", "result")
    if not request_json:
        log.warning("booking_not_exported", request_id=request_id, reason="its record has no request")
        return None
    booking: dict[str, Any] = {
        "request_id": request_id, "request": json.loads(request_json), "instance": json.loads(row),
    }
    if result_json:
        booking["result"] = json.loads(result_json)
    return booking


# ------------------------------------------------------------------ validate
def parse_bookings(raw: Any, rows: SnapshotRows, limits: IntakeLimits | None = None) -> list[RestoredBooking]:
    """Validate a recovery document's ``bookings`` against its snapshot rows.

    Raises:
        InvalidField: naming ``bookings.<n>.<field>`` (nothing is written).
    """
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidField("bookings", "must be a list of {request_id, request, instance}")
    workers = {worker.id for worker in rows.workers}
    parsed: list[RestoredBooking] = []
    seen: set[str] = set()
    for position, entry in enumerate(raw):
        booking = _parse_booking(f"bookings.{position}", entry, workers, limits)
        if booking.request.request_id in seen:
            raise InvalidField(f"bookings.{position}.request_id",
                               f"duplicate booking for {booking.request.request_id!r}")
        seen.add(booking.request.request_id)
        parsed.append(booking)
    return parsed


def _parse_booking(
    where: str, entry: Any, workers: set[int], limits: IntakeLimits | None
) -> RestoredBooking:
    if not isinstance(entry, Mapping):
        raise InvalidField(where, "must be an object with request_id, request and instance")
    for name in ("request_id", "request", "instance"):
        if name not in entry:
            raise InvalidField(f"{where}.{name}", "is required")
    request = normalize(entry["request"], limits)
    if request.rejection is not None:
        error = error_of(request.rejection) or {}
        field = f"{where}.request.{error['field']}" if error.get("field") else f"{where}.request"
        raise InvalidField(field, str(error.get("message") or "invalid request"))
    if request.request_id != entry["request_id"]:
        raise InvalidField(f"{where}.request_id",
                           f"{entry['request_id']!r} is not the request's id {request.request_id!r}")
    try:
        instance = ModelInstance.model_validate(entry["instance"])
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        field = ".".join(str(part) for part in first["loc"])
        raise InvalidField(f"{where}.instance.{field}".rstrip("."), str(first["msg"])) from None
    missing = [wid for wid in occupied_workers(instance) if wid not in workers]
    if missing:
        raise InvalidField(f"{where}.instance.worker_id", f"worker {missing[0]} is not in the snapshot")
    result = entry.get("result")
    return RestoredBooking(request, instance, dumps(result) if isinstance(result, Mapping) else "")


# ------------------------------------------------------------------- recover
def recover(rt: Runtime, document: Mapping[str, Any]) -> dict[str, Any]:
    """Rebuild the partition from a recovery document (see the module docstring).

    Idempotent enough to run again after a failure: the snapshot replaces
    the cluster, bookings already restored are left alone, and the marker
    stays until the last step.

    Raises:
        pydantic.ValidationError / InvalidField: invalid rows or bookings (nothing is written).
    """
    rows = parse_snapshot(document)
    # restored bookings were decided already: their local_path is not read here, so this
    # process's model_roots do not judge it (the worker that moves one checks its own)
    limits = replace(IntakeLimits.of(rt.settings), check_local_paths=False)
    bookings = parse_bookings(document.get("bookings"), rows, limits)
    supersedes = _pause(rt)
    held = [meta.request_id for meta in rt.cluster.instance_meta().values()
            if meta.source == "gpusched" and meta.request_id]
    event = rt.partition.meta()
    # the recovery states the whole cluster: removing workers a rolled-back state still lists is meant
    applied = rt.cluster.apply_snapshot(rows, taken_over=held, meta=event, allow_removal=True)
    types = {worker.id: worker_gpu_types(worker) for worker in rows.workers}
    overbooked: list[dict[str, Any]] = []
    restored = 0
    for booking in bookings:
        outcome, _, over = rt.cluster.restore_booking(
            booking.request.request_id, booking.request.request_json, booking.request.digest,
            _booking(booking, types), booking.result_json,
        )
        restored += outcome == "restored"
        overbooked.extend(over)
    _expire_unrestored(rt, held, {b.request.request_id for b in bookings})
    generation = _resume(rt, supersedes, len(rows.workers), len(rows.instances), len(bookings))
    done = run_followup(rt, event.event_id)
    log.warning("data_recovered", generation=generation, supersedes=supersedes, bookings=restored)
    return {
        "kind": "recovery", "status": "recovered", "generation": generation, "supersedes": supersedes,
        "version": rt.cluster.version(), "snapshot_version": applied.version, "workers": len(rows.workers),
        "instances": len(rows.instances), "bookings": restored, "overbooked": overbooked, **done,
    }


def _booking(booking: RestoredBooking, types: Mapping[int, Sequence[str | None]]) -> Booking:
    request_id = booking.request.request_id
    held = instance_claims(booking.instance, types)
    key = booked_instance_key(request_id)
    meta = InstanceMeta(
        "gpusched", (0, 0), request_id=request_id, pinned=booking.request.pinned,
        workers=tuple(occupied_workers(booking.instance)),
    ).to_dict_without_order()
    stored_row = row_json(booking.instance)
    data = dumps({"instance_key": key, "row": json.loads(stored_row), "meta": meta,
                  "claims": dict(sorted(held.items())), "request_id": request_id, "restored": True})
    return Booking(key, stored_row, dumps(meta), encode_amounts(held), data)


def _pause(rt: Runtime) -> list[str]:
    """Set the loss marker (every worker pauses); returns the generations the new one supersedes."""
    k = rt.keys
    raw_marker, raw_generation = rt.client.mget([k.data_lost, k.generation])
    marker = _json_object(raw_marker)
    current = generation_id(raw_generation)
    candidates = [marker.get("remembered_generation"), marker.get("found_generation"), current,
                  rt.generation.remembered]
    supersedes = list(dict.fromkeys(str(c) for c in candidates if c))
    paused = {**marker, "verdict": "recovering", "recovering_since": utc_now_iso(),
              "detail": marker.get("detail") or "a recovery is rebuilding the state"}
    rt.client.set(k.data_lost, json.dumps(paused, sort_keys=True))
    return supersedes


def _expire_unrestored(rt: Runtime, held: Sequence[str], restored: set[str]) -> None:
    """Records of bookings Redis held that the recovery did not restore expire like released ones."""
    pipe = rt.client.pipeline(transaction=False)
    for request_id in held:
        if request_id not in restored:
            pipe.expire(rt.keys.request(request_id), rt.settings.request_ttl_s)
    pipe.execute()


def _resume(rt: Runtime, supersedes: list[str], workers: int, instances: int, bookings: int) -> str:
    """Write the new generation, remove the marker (workers adopt it and resume), log the recovery."""
    k = rt.keys
    generation = uuid.uuid4().hex
    record = {"id": generation, "recovery": True, "supersedes": supersedes, "created": utc_now_iso(),
              "created_by": rt.partition.source}
    pipe = rt.client.pipeline(transaction=True)
    pipe.set(k.generation, json.dumps(record, sort_keys=True))
    pipe.delete(k.data_lost)
    pipe.execute()
    rt.generation.memory.remember(generation)
    rt.generation.versions_of, rt.generation.max_version = generation, 0
    append_event(rt.client, k.events, "sched.data.recovered", {
        "generation": generation, "supersedes": supersedes, "workers": workers, "instances": instances,
        "bookings": bookings,
    })
    return generation


def _json_object(raw: Any) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
