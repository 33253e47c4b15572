"""Cluster state and claims ledger in Redis: snapshots, worker changes, releases.

Each mutation is one Lua script that applies the change, bumps the cluster
version (and the wake epoch), and appends the change to both the audit stream
and the compact changes stream in the same atomic step, so folding the log
(:mod:`tasks.fold`) reproduces the state at every version.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from scheduler_core import ModelInstance, Worker, canonical_json
from tasks.fold import InstanceMeta, SnapshotRows, parse_snapshot
from tasks.ledger import (
    decode_amounts,
    encode_amounts,
    instance_claims,
    occupied_workers,
    worker_capacity,
    worker_gpu_types,
)
from tasks.store import Store
from tasks.streams import dumps


@dataclass(frozen=True, slots=True)
class Released:
    """An instance released by a script, with its meta (who booked it, pinned, workers)."""

    key: str
    meta: InstanceMeta


@dataclass(frozen=True, slots=True)
class Applied:
    """Outcome of :meth:`ClusterStore.apply_snapshot`."""

    version: int
    digest: str
    dropped: tuple[Released, ...]


@dataclass(frozen=True, slots=True)
class WorkerChange:
    """Outcome of an upsert: the new version, or ``stale`` when the row moved."""

    status: str
    version: int | None = None
    overbooked: int = 0


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
    return text, hashlib.sha256(text.encode()).hexdigest()


def _meta_without_order(meta: InstanceMeta) -> str:
    data = meta.to_dict()
    data.pop("v")
    data.pop("i")
    return dumps(data)


def _released(raw: str) -> tuple[Released, ...]:
    items = json.loads(raw) if raw else []
    if isinstance(items, dict):  # Lua's cjson encodes an empty table as {}
        items = []
    return tuple(
        Released(item["key"], InstanceMeta.from_dict({**item["meta"], "w": _list(item["meta"].get("w"))}))
        for item in items
    )


def _list(value: Any) -> list[Any]:
    return [] if isinstance(value, dict) or value is None else list(value)


class ClusterStore:
    """Cluster mutations and reads for one partition (shares the request store's client)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.keys = store.keys
        self.client = store.client

    # ---------------------------------------------------------------- mutations
    def apply_snapshot(
        self, document: Mapping[str, Any], *, taken_over: Sequence[str] = ()
    ) -> Applied:
        """Replace the cluster with a validated snapshot (see ``cluster_apply.lua``).

        Raises:
            pydantic.ValidationError / ValueError: invalid rows (nothing is written).
        """
        rows = parse_snapshot(document)
        text, digest = snapshot_document(rows)
        k = self.keys
        args: list[Any] = [
            *self.store.meta().argv(), digest, text, self.store.settings.changes_maxlen,
            ";".join(taken_over), len(rows.workers),
        ]
        for worker in rows.workers:
            args.extend([worker.id, row_json(worker), encode_amounts(worker_capacity(worker))])
        args.extend(self._instance_args(rows))
        reply = self.store.scripts.run(
            "cluster_apply",
            [
                k.version, k.epoch, k.workers, k.worker_gpus, k.capacity, k.booked, k.instances,
                k.instance_meta, k.claims, k.changes, k.events, k.snapshot(digest),
            ],
            args,
        )
        return Applied(int(reply[0]), digest, _released(reply[1]))

    def _instance_args(self, rows: SnapshotRows) -> list[Any]:
        types = {w.id: worker_gpu_types(w) for w in rows.workers}
        args: list[Any] = [len(rows.instances)]
        for key, instance in rows.instances:
            meta = InstanceMeta("snapshot", (0, 0), workers=tuple(occupied_workers(instance)))
            claims = encode_amounts(instance_claims(instance, types))
            args.extend([key, row_json(instance), _meta_without_order(meta), claims])
        return args

    def upsert_worker(
        self, worker: Worker, expected_row: str | None, data: Mapping[str, Any]
    ) -> WorkerChange:
        """Add or update ``worker``; ``expected_row`` is the row read before (None: new)."""
        k = self.keys
        row = row_json(worker)
        event = dumps({**data, "worker_id": worker.id, "row": json.loads(row)})
        reply = self.store.scripts.run(
            "worker_upsert",
            [k.version, k.epoch, k.workers, k.worker_gpus, k.capacity, k.booked, k.changes, k.events],
            [
                *self.store.meta().argv(), worker.id, "" if expected_row is None else expected_row,
                row, encode_amounts(worker_capacity(worker)), self.store.settings.changes_maxlen,
                event,
            ],
        )
        if reply[0] != "ok":
            return WorkerChange("stale")
        return WorkerChange("ok", int(reply[1]), int(reply[2]))

    def remove_worker(self, worker_id: int, reason: str) -> tuple[int | None, tuple[Released, ...]]:
        """Remove a worker and release its instances; (None, ()) when it was unknown."""
        k = self.keys
        reply = self.store.scripts.run(
            "worker_remove",
            [
                k.version, k.epoch, k.workers, k.worker_gpus, k.capacity, k.booked, k.instances,
                k.instance_meta, k.claims, k.changes, k.events, k.health,
            ],
            [*self.store.meta().argv(), worker_id, self.store.settings.changes_maxlen, reason],
        )
        if reply[0] != "removed":
            return None, ()
        return int(reply[1]), _released(reply[2])

    def release(self, instance_keys: Sequence[str], reason: str) -> tuple[int | None, tuple[Released, ...]]:
        """Release instances (idempotent); (None, ()) when none of them was held."""
        if not instance_keys:
            return None, ()
        k = self.keys
        reply = self.store.scripts.run(
            "release",
            [k.version, k.epoch, k.booked, k.instances, k.instance_meta, k.claims, k.changes, k.events],
            [*self.store.meta().argv(), self.store.settings.changes_maxlen, reason, *instance_keys],
        )
        if reply[0] != "released":
            return None, ()
        return int(reply[1]), _released(reply[2])

    # -------------------------------------------------------------------- reads
    def worker_row(self, worker_id: int) -> str | None:
        """The stored row JSON of a worker."""
        value = self.client.hget(self.keys.workers, str(worker_id))
        return None if value is None else str(value)

    def worker_rows(self) -> dict[int, str]:
        """All worker rows by id."""
        rows = self.client.hgetall(self.keys.workers)
        return {int(wid): str(row) for wid, row in rows.items()}

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
        return parse_snapshot(json.loads(text))

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


def parse_meta(raw: str) -> InstanceMeta:
    data = json.loads(raw)
    data["w"] = _list(data.get("w"))
    return InstanceMeta.from_dict(data)


def row_dict(row: Worker | ModelInstance) -> dict[str, Any]:
    """A validated row as JSON data (``None`` fields dropped: they are the defaults)."""
    return row.model_dump(mode="json", exclude_none=True)


def row_json(row: Worker | ModelInstance) -> str:
    """Canonical JSON of a validated row."""
    return canonical_json(row_dict(row))
