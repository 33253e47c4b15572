"""Cluster state and the claims ledger in Redis: snapshots, worker changes, bookings, releases.

Each mutation is one Lua script that applies the change, bumps the cluster
version (and the wake epoch when the change can unblock parked requests),
appends the change to both the audit stream and the compact changes stream,
updates the workers' outage clocks, and records the change's follow-up work
(reschedule, expire, wake; see :mod:`tasks.flows.followups`) in the same
atomic step, so folding the log (:mod:`tasks.state.fold`) reproduces the
state at every version and no follow-up is lost with the caller. The
follow-up id is the event id of the ``meta`` the caller passes. A booking
(``reserve.lua``) is the one cluster change a decision makes: it is guarded
by the request record, so only the recorded decision of the record's current
attempt can book, and at most once.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from scheduler_core import Worker, canonical_json
from tasks.base.digests import sha256_hex
from tasks.base.events import EventMeta, dumps
from tasks.base.lifecycle import RecordState
from tasks.base.rows import InstanceMeta, Released, parse_meta, released_items, row_dict, row_json
from tasks.intake.snapshots import InvalidField, SnapshotRows, parse_snapshot, stored_snapshot
from tasks.state.ledger import (
    decode_amounts,
    encode_amounts,
    encode_keys,
    instance_claims,
    occupied_workers,
    worker_capacity,
    worker_gpu_types,
)
from tasks.state.partition import Partition
from tasks.state.scripts import ScriptCall


@dataclass(frozen=True, slots=True)
class Applied:
    """Outcome of :meth:`ClusterStore.apply_snapshot`."""

    version: int
    digest: str
    dropped: tuple[Released, ...]
    followup: str = ""


class RemovalRefused(InvalidField):
    """A snapshot would remove more workers than ``max_removed_fraction`` allows unconfirmed.

    Nothing was written. ``removed`` of the ``stored`` workers are not in the
    snapshot; confirm with ``allow_removal`` (``--allow-removal``) if that is meant.
    """

    def __init__(self, removed: int, stored: int, fraction: float) -> None:
        super().__init__(
            "workers",
            f"the snapshot removes {removed} of the {stored} workers (more than max_removed_fraction "
            f"{fraction:g}); nothing was applied: pass --allow-removal (allow_removal) if it is meant",
        )
        self.removed, self.stored = removed, stored


def removal_refusal(
    stored_ids: Collection[str], new_ids: Collection[str], fraction: float, *, allow_removal: bool
) -> RemovalRefused | None:
    """The refusal a snapshot of ``new_ids`` meets over the stored ``stored_ids``, None if it applies.

    The rule ``cluster_apply.lua`` enforces atomically when it applies (more than
    ``fraction`` of the stored workers missing from the snapshot, unconfirmed), for
    the checks made before that: ``--dry-run`` and a cluster event at the door.
    """
    present = set(new_ids)
    removed = sum(1 for worker_id in stored_ids if worker_id not in present)
    if allow_removal or removed <= fraction * len(stored_ids):
        return None
    return RemovalRefused(removed, len(stored_ids), fraction)


@dataclass(frozen=True, slots=True)
class WorkerChange:
    """Outcome of an upsert: the new version, or ``stale`` when the row moved."""

    status: str
    version: int | None = None
    overbooked: int = 0
    followup: str = ""


@dataclass(frozen=True, slots=True)
class Booking:
    """What a reservation books: the instance row, its meta and its claims."""

    instance_key: str
    row_json: str
    meta_json: str
    claims: str
    event_data: str


@dataclass(frozen=True, slots=True)
class Reserved:
    """Outcome of a ``reserve`` call (``version``: the cluster version a booking produced)."""

    status: str
    version: int | None = None
    detail: str | None = None
    next_attempt: int | None = None


def snapshot_document(rows: SnapshotRows) -> tuple[str, str]:
    """Canonical JSON of a validated snapshot (normalised rows) and its sha256 digest.

    Rows are stored as the service understood them (unknown fields dropped,
    legacy aliases resolved), so the stored snapshot, the live hashes and every
    replay fold parse to identical objects.
    """
    document = {
        "workers": [row_dict(w) for w in rows.workers],
        "model_instances": [row_dict(i) for _, i in rows.instances],
    }
    text = canonical_json(document)
    return text, sha256_hex(text)


def _released(raw: str) -> tuple[Released, ...]:
    return released_items(json.loads(raw) if raw else [])


class ClusterStore:
    """Cluster mutations and reads for one partition."""

    def __init__(self, partition: Partition) -> None:
        self._partition = partition
        self.keys = partition.keys
        self.client = partition.client

    # ---------------------------------------------------------------- mutations
    def _health_args(self) -> list[int]:
        p = self._partition
        return [
            p.now_ms(), int(p.settings.unreachable_grace_s * 1000), int(p.settings.ready_stable_s * 1000),
        ]

    def apply_snapshot(
        self,
        document: Mapping[str, Any] | SnapshotRows,
        *,
        taken_over: Sequence[str] = (),
        meta: EventMeta | None = None,
        allow_removal: bool = False,
        wake: Sequence[Mapping[str, Any]] | None = None,
        wake_version: int = 0,
    ) -> Applied:
        """Replace the cluster with a validated snapshot (see ``cluster_apply.lua``).

        Args:
            allow_removal: confirm a snapshot that removes more than
                ``max_removed_fraction`` of the stored workers.
            wake: the workers' wake facts (``[{kind, workers}]``,
                :func:`tasks.state.parking.snapshot_facts`) derived from the rows stored at
                cluster version ``wake_version``; the script adds the capacity it frees
                and wakes only what those changes could unblock. None, or a version that
                moved meanwhile: every parked request is woken.

        Raises:
            pydantic.ValidationError / tasks.intake.snapshots.InvalidField: invalid rows (nothing is written).
            RemovalRefused: too many workers would go and ``allow_removal`` is not set (nothing is written).
        """
        rows = document if isinstance(document, SnapshotRows) else parse_snapshot(document)
        text, digest = snapshot_document(rows)
        k = self.keys
        args: list[Any] = [
            *(meta or self._partition.meta()).argv(), digest, text, self._partition.settings.changes_maxlen,
            encode_keys(taken_over), *self._health_args(), self._partition.lease_deadline_ms(),
            self._partition.settings.max_removed_fraction, "1" if allow_removal else "0",
            "" if wake is None else dumps(list(wake)), wake_version, len(rows.workers),
        ]
        for worker in rows.workers:
            args.extend([worker.id, row_json(worker), encode_amounts(worker_capacity(worker))])
        args.extend(self._instance_args(rows))
        reply = self._partition.run(
            "cluster_apply",
            [
                k.version, k.epoch, k.workers, k.worker_gpus, k.capacity, k.booked, k.instances,
                k.instance_meta, k.claims, k.changes, k.events, k.snapshot(digest), k.health,
                k.timers, k.followups, k.followup_jobs, k.vanished,
            ],
            args,
        )
        if reply[0] == "refused":
            raise RemovalRefused(int(reply[1]), int(reply[2]), self._partition.settings.max_removed_fraction)
        return Applied(int(reply[1]), digest, _released(reply[2]), reply[3])

    def _instance_args(self, rows: SnapshotRows) -> list[Any]:
        types = {w.id: worker_gpu_types(w) for w in rows.workers}
        args: list[Any] = [len(rows.instances)]
        for key, instance in rows.instances:
            meta = InstanceMeta("snapshot", (0, 0), workers=tuple(occupied_workers(instance)))
            claims = encode_amounts(instance_claims(instance, types))
            args.extend([key, row_json(instance), dumps(meta.to_dict_without_order()), claims])
        return args

    def upsert_worker(
        self,
        worker: Worker,
        expected_row: str | None,
        data: Mapping[str, Any],
        *,
        wake: Sequence[Mapping[str, Any]] = (),
        meta: EventMeta | None = None,
    ) -> WorkerChange:
        """Add or update ``worker``; ``expected_row`` is the row read before (None: new).

        Args:
            wake: the change's wake-relevant facts (``[{kind, workers}]``); when
                non-empty the wake epoch is bumped and the wake recorded as the
                change's follow-up (id = the event id).
        """
        k = self.keys
        row = row_json(worker)
        event = dumps({**data, "worker_id": worker.id, "row": json.loads(row)})
        reply = self._partition.run(
            "worker_upsert",
            [
                k.version, k.epoch, k.workers, k.worker_gpus, k.capacity, k.booked, k.changes,
                k.events, k.health, k.timers, k.followups, k.followup_jobs, k.vanished,
            ],
            [
                *(meta or self._partition.meta()).argv(), worker.id,
                "" if expected_row is None else expected_row, row,
                encode_amounts(worker_capacity(worker)), self._partition.settings.changes_maxlen,
                event, dumps(list(wake)) if wake else "", *self._health_args(),
                self._partition.lease_deadline_ms(),
            ],
        )
        if reply[0] != "ok":
            return WorkerChange("stale")
        return WorkerChange("ok", int(reply[1]), int(reply[2]), reply[3])

    def remove_worker(
        self, worker_id: int, reason: str, *, meta: EventMeta | None = None
    ) -> tuple[int | None, tuple[Released, ...]]:
        """Remove a worker and release its instances; (None, ()) when it was unknown.

        The released bookings' rescheduling is recorded as the follow-up of
        ``meta``'s event id (see :func:`tasks.flows.followups.run_followup`).
        """
        k = self.keys
        reply = self._partition.run(
            "worker_remove",
            [
                k.version, k.workers, k.worker_gpus, k.capacity, k.booked, k.instances,
                k.instance_meta, k.claims, k.changes, k.events, k.health, k.timers,
                k.followups, k.followup_jobs, k.vanished,
            ],
            [
                *(meta or self._partition.meta()).argv(), worker_id, self._partition.settings.changes_maxlen,
                reason, self._partition.lease_deadline_ms(), self._partition.now_ms(),
            ],
        )
        if reply[0] != "removed":
            return None, ()
        return int(reply[1]), _released(reply[2])

    def release(
        self,
        instance_keys: Sequence[str],
        reason: str,
        *,
        reschedule: bool = False,
        wake: str = "",
        meta: EventMeta | None = None,
    ) -> tuple[int | None, tuple[Released, ...]]:
        """Release instances (idempotent); (None, ()) when none of them was held.

        Args:
            reschedule: the follow-up reschedules the released gpusched bookings.
            wake: wake change kind for the freed GPUs (``capacity_freed``; bumps
                the wake epoch), "" for none.
            meta: event envelope; its event id names the follow-up.
        """
        if not instance_keys:
            return None, ()
        k = self.keys
        reply = self._partition.run(
            "release",
            [
                k.version, k.epoch, k.booked, k.instances, k.instance_meta, k.claims, k.changes,
                k.events, k.followups, k.followup_jobs,
            ],
            [
                *(meta or self._partition.meta()).argv(), self._partition.settings.changes_maxlen, reason,
                "1" if reschedule else "0", wake, self._partition.lease_deadline_ms(), *instance_keys,
            ],
        )
        if reply[0] != "released":
            return None, ()
        return int(reply[1]), _released(reply[2])

    def reserve_call(
        self,
        request_id: str,
        seq: int,
        attempt: int,
        booking: Booking,
        retry_due_ms: int,
        retried_data: str,
        *,
        result_digest: str,
    ) -> ScriptCall[Reserved]:
        """Book all claims of ``booking`` or none (see ``reserve.lua``).

        ``result_digest`` names the recorded decision the booking comes from;
        on a conflict the script queues attempt ``attempt + 1`` in the outbox,
        due at ``retry_due_ms``.
        """
        p = self._partition
        k = p.keys
        keys = [
            k.request(request_id), k.capacity, k.booked, k.instances, k.instance_meta,
            k.claims, k.version, k.changes, k.events, k.outbox,
        ]
        args = [
            *p.meta().argv(), request_id, seq, attempt, result_digest, booking.instance_key,
            booking.row_json, booking.meta_json, booking.claims, booking.event_data,
            p.settings.conflict_max_attempts, retry_due_ms, p.settings.changes_maxlen, p.now_ms(),
            retried_data,
        ]
        return ScriptCall("reserve", keys, args, _reserved)

    def restore_booking(
        self, request_id: str, request_json: str, digest: str, booking: Booking, result_json: str,
        *, meta: EventMeta | None = None,
    ) -> tuple[str, int | None, list[dict[str, Any]]]:
        """Re-create one of gpusched's bookings and its done record (a recovery; ``restore_booking.lua``).

        Returns:
            (``restored`` or ``present``, the version it produced, the GPUs it overbooks).
        """
        p = self._partition
        k = p.keys
        reply = p.run(
            "restore_booking",
            [k.request(request_id), k.capacity, k.booked, k.instances, k.instance_meta, k.claims,
             k.version, k.changes, k.events],
            [
                *(meta or p.meta()).argv(), request_id, request_json, digest, booking.instance_key,
                booking.row_json, booking.meta_json, booking.claims, booking.event_data, result_json,
                p.settings.changes_maxlen, p.now_ms(),
            ],
        )
        if reply[0] != "restored":
            return "present", None, []
        over = json.loads(reply[2])
        return "restored", int(reply[1]), over if isinstance(over, list) else []

    # -------------------------------------------------------------------- reads
    def worker_row(self, worker_id: int) -> str | None:
        """The stored row JSON of a worker."""
        value = self.client.hget(self.keys.workers, str(worker_id))
        return None if value is None else str(value)

    def worker_ids(self) -> list[str]:
        """The ids of the stored workers (decimal strings, unordered)."""
        return [str(key) for key in self.client.hkeys(self.keys.workers)]

    def ledger(self) -> tuple[dict[str, int], dict[str, int]]:
        """(capacity, booked) per GPU key, read atomically."""
        pipe = self.client.pipeline(transaction=True)
        pipe.hgetall(self.keys.capacity)
        pipe.hgetall(self.keys.booked)
        capacity, booked = pipe.execute()
        return (
            {key: int(value) for key, value in capacity.items()},
            {key: int(value) for key, value in booked.items()},
        )

    def claims(self) -> dict[str, dict[str, int]]:
        """Claims per instance key."""
        raw = cast(dict[str, str], self.client.hgetall(self.keys.claims))
        return {key: decode_amounts(value) for key, value in raw.items()}

    def instance_meta(self) -> dict[str, InstanceMeta]:
        """Meta of every instance."""
        raw = cast(dict[str, str], self.client.hgetall(self.keys.instance_meta))
        return {key: parse_meta(value) for key, value in raw.items()}

    def version(self) -> int:
        """Current cluster version (0 before the first change)."""
        return int(self.client.get(self.keys.version) or 0)

    def snapshot_rows(self, digest: str) -> SnapshotRows:
        """The stored snapshot of ``digest``, validated.

        Raises:
            LookupError: no snapshot under that digest.
        """
        text = self.client.get(self.keys.snapshot(digest))
        if text is None:
            raise LookupError(f"snapshot {digest} is not stored")
        return stored_snapshot(text)

    def worker_rows(self) -> tuple[int, dict[str, str]]:
        """(cluster version, worker rows by id), atomically."""
        pipe = self.client.pipeline(transaction=True)
        pipe.get(self.keys.version)
        pipe.hgetall(self.keys.workers)
        version, workers = pipe.execute()
        return int(version or 0), dict(workers)

    def read_state(self) -> tuple[int, str, dict[str, str], dict[str, str], dict[str, str]]:
        """(version, last changes id, worker rows, instance rows, instance metas), atomically."""
        k = self.keys
        pipe = self.client.pipeline(transaction=True)
        pipe.get(k.version)
        pipe.xrevrange(k.changes, count=1)
        pipe.hgetall(k.workers)
        pipe.hgetall(k.instances)
        pipe.hgetall(k.instance_meta)
        version, last, workers, instances, metas = pipe.execute()
        last_id = str(last[0][0]) if last else "0-0"
        return int(version or 0), last_id, dict(workers), dict(instances), dict(metas)


def _reserved(reply: Any) -> Reserved:
    status = reply[0]
    if status == RecordState.BOOKED:
        return Reserved(status, version=int(reply[1]))
    if status == "conflict":
        return Reserved(status, detail=reply[1], next_attempt=int(reply[2]))
    return Reserved(status, detail=reply[1] if len(reply) > 1 else None)
