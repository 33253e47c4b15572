"""Cluster state as a fold of its change events.

Every cluster mutation is recorded as one event (``sched.cluster.applied``,
``sched.worker.upserted``, ``sched.worker.removed``,
``sched.reservation.booked``, ``sched.instance.released``) carrying the
version it produced. Folding those events in version order rebuilds the exact
``workers`` and ``model_instances`` lists a decision saw at any version; the
workers' in-memory mirrors (fed from the compact changes stream) and the
replay (fed from the audit stream) share this one implementation, so they
cannot disagree.

Order rules (the core is order-sensitive, so they are part of the contract):
workers are presented by ascending id (GPUStack's database order); instances
in the order they entered the cluster (version, then position in a snapshot).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler_core import ModelInstance, Worker, extended
from tasks.base.rows import InstanceMeta
from tasks.intake.snapshots import SnapshotRows
from tasks.state.ledger import occupied_workers, worker_gpu_types

#: Event types that change the cluster (and therefore carry a version).
CLUSTER_APPLIED = "sched.cluster.applied"
WORKER_UPSERTED = "sched.worker.upserted"
WORKER_REMOVED = "sched.worker.removed"
RESERVATION_BOOKED = "sched.reservation.booked"
INSTANCE_RELEASED = "sched.instance.released"
CHANGE_TYPES = frozenset(
    {CLUSTER_APPLIED, WORKER_UPSERTED, WORKER_REMOVED, RESERVATION_BOOKED, INSTANCE_RELEASED}
)


@dataclass(slots=True)
class ClusterFold:
    """Workers and instances at ``version``; mutate only through the ``apply_*`` methods."""

    version: int = 0
    workers: dict[int, Worker] = field(default_factory=dict)
    instances: dict[str, ModelInstance] = field(default_factory=dict)
    meta: dict[str, InstanceMeta] = field(default_factory=dict)
    _worker_list: tuple[Worker, ...] | None = None
    #: Instances in cluster-entry order; a booking appends to it (:func:`scheduler_core.extended`).
    _instance_list: tuple[ModelInstance, ...] | None = None
    #: Per worker id, the instances occupying it by key, in cluster-entry order (None: not
    #: built since the instances were last replaced; kept up to date by bookings and releases).
    _by_worker: dict[int, dict[str, ModelInstance]] | None = None

    # ----------------------------------------------------------------- reads
    def worker_list(self) -> tuple[Worker, ...]:
        """Workers by ascending id (cached until a worker changes: a decider's memo finds the
        same tuple in one identity test)."""
        if self._worker_list is None:
            self._worker_list = tuple(self.workers[wid] for wid in sorted(self.workers))
        return self._worker_list

    def instance_list(self) -> tuple[ModelInstance, ...]:
        """Instances in cluster-entry order (cached until an instance changes; a new booking
        hands out the last tuple extended by it, which a decider's memo compares at once)."""
        if self._instance_list is None:
            self._instance_list = tuple(self.instances.values())
        return self._instance_list

    def instances_on(self, worker_id: int) -> list[ModelInstance]:
        """The instances occupying the worker (as main or subordinate), in cluster-entry order.

        A release of capacity looks at its workers' instances only: the index is built once
        and then follows each booking and release instead of a walk over the cluster.
        """
        if self._by_worker is None:
            index: dict[int, dict[str, ModelInstance]] = {}
            for key, instance in self.instances.items():
                for occupied in occupied_workers(instance):
                    index.setdefault(occupied, {})[key] = instance
            self._by_worker = index
        return list(self._by_worker.get(worker_id, {}).values())

    def gpu_types(self) -> dict[int, tuple[str | None, ...]]:
        """GPU types per worker id (for instances without a GPU type)."""
        return {wid: worker_gpu_types(worker) for wid, worker in self.workers.items()}

    # ---------------------------------------------------------------- writes
    def load(
        self,
        version: int,
        workers: Iterable[Worker],
        instances: Iterable[tuple[str, ModelInstance, InstanceMeta]],
    ) -> None:
        """Replace everything (a full read of the live state); instances sorted by entry order."""
        self.version = version
        self.workers = {w.id: w for w in workers}
        ordered = sorted(instances, key=lambda item: item[2].order)
        self.instances = {key: instance for key, instance, _ in ordered}
        self.meta = {key: meta for key, _, meta in ordered}
        self._by_worker = None
        self._invalidate(workers=True)

    def apply_snapshot(self, version: int, rows: SnapshotRows, kept: Sequence[str]) -> None:
        """A ``cluster apply``: new workers; kept bookings first, then the snapshot's instances.

        A worker whose row did not change keeps its object (:func:`_unchanged`): a
        decider's memo keeps what it derived from a worker while the object is the
        same, so after a snapshot that drops a tenth of the workers the next
        decision re-derives nothing for the others.
        """
        kept_set = set(kept)
        keep = [key for key in self.instances if key in kept_set]
        instances = {key: self.instances[key] for key in keep}
        meta = {key: self.meta[key] for key in keep}
        for position, (key, instance) in enumerate(rows.instances):
            instances[key] = instance
            meta[key] = InstanceMeta(
                "snapshot", (version, position), workers=tuple(occupied_workers(instance))
            )
        before = self.workers
        self.workers = {w.id: _unchanged(before.get(w.id), w) for w in rows.workers}
        self.instances, self.meta = instances, meta
        self._by_worker = None
        self.version = version
        self._invalidate(workers=True)

    def apply_worker(self, version: int, worker: Worker) -> None:
        """A worker was added or updated."""
        self.workers[worker.id] = worker
        self.version = version
        self._invalidate(workers=True)

    def apply_worker_removed(self, version: int, worker_id: int, released: Sequence[str]) -> None:
        """A worker left; the instances it held were released with it."""
        self.workers.pop(worker_id, None)
        self._drop(released)
        self.version = version
        self._invalidate(workers=True)

    def apply_booked(
        self, version: int, key: str, instance: ModelInstance, meta: InstanceMeta
    ) -> None:
        """A reservation added an instance."""
        index = self._by_worker
        replaced = key in self.instances  # in place: its position stays
        if index is not None and replaced:
            self._by_worker = None  # build again
        elif index is not None:
            for occupied in occupied_workers(instance):
                index.setdefault(occupied, {})[key] = instance
        self.instances[key] = instance
        self.meta[key] = meta
        self.version = version
        listed = self._instance_list
        self._invalidate(workers=False)
        if listed is not None and not replaced:  # a new key comes last in entry order
            self._instance_list = extended(listed, (instance,))

    def apply_released(self, version: int, keys: Sequence[str]) -> None:
        """Instances were released (deleted, lost or rescheduled)."""
        self._drop(keys)
        self.version = version
        self._invalidate(workers=False)

    def apply_change(
        self,
        change_type: str,
        version: int,
        data: Mapping[str, Any],
        snapshot_loader: Callable[[str], SnapshotRows],
    ) -> None:
        """Apply one recorded change (same payload in the events and the changes stream).

        Raises:
            ValueError: ``version`` does not follow the fold's version, or the type is unknown.
        """
        if version != self.version + 1:
            raise ValueError(f"change {change_type} v{version} does not follow v{self.version}")
        if change_type == CLUSTER_APPLIED:
            self.apply_snapshot(version, snapshot_loader(data["digest"]), data.get("kept") or ())
        elif change_type == WORKER_UPSERTED:
            self.apply_worker(version, Worker.model_validate(data["row"]))
        elif change_type == WORKER_REMOVED:
            released = [item["key"] for item in data.get("released") or ()]
            self.apply_worker_removed(version, int(data["worker_id"]), released)
        elif change_type == RESERVATION_BOOKED:
            meta = InstanceMeta.from_dict({**data["meta"], "v": version, "i": 0})
            instance = ModelInstance.model_validate(data["row"])
            self.apply_booked(version, data["instance_key"], instance, meta)
        elif change_type == INSTANCE_RELEASED:
            self.apply_released(version, [item["key"] for item in data.get("released") or ()])
        else:
            raise ValueError(f"unknown change type {change_type!r}")

    def _drop(self, keys: Iterable[str]) -> None:
        index = self._by_worker
        for key in keys:
            instance = self.instances.pop(key, None)
            self.meta.pop(key, None)
            if index is not None and instance is not None:
                for occupied in occupied_workers(instance):
                    index.get(occupied, {}).pop(key, None)

    def _invalidate(self, *, workers: bool) -> None:
        self._instance_list = None
        if workers:
            self._worker_list = None


def _unchanged(before: Worker | None, after: Worker) -> Worker:
    """``before`` when it is the same row as ``after`` (every field and which were set), else ``after``.

    Rows are frozen and the core reads only their fields, so either object gives
    the same decision: keeping the old one only keeps what was derived from it.
    """
    if before is not None and before == after and before.model_fields_set == after.model_fields_set:
        return before
    return after


def decode_data(raw: str | bytes) -> dict[str, Any]:
    """Parse an event's ``data`` field."""
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("event data must be a JSON object")
    return value
