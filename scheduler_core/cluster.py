"""A per-decision view of the cluster: workers, their GPUs and what is allocatable.

Allocatable memory follows GPUStack's ``policies/utils.py`` exactly
(total − Σ claims of bound instances − reserved, reserved counted per GPU),
with one deliberate difference: every lookup is keyed by GPU *type* as well as
index, so ``cuda:0`` and ``rocm:0`` on one mixed worker never collide and no
worker copy shares GPU lists with another (GPUStack's shallow-copy bug).

The view is built once per decision in O(instances + workers × GPUs) and
memoises allocatable resources per ``(worker id, GPU type)``.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import NamedTuple, TypeVar

from scheduler_core._schemas import ModelInstance, SubordinateWorker, Worker

#: GPUStack's memory-balance rule: a GPU joins a group when the group's smallest
#: allocatable is at least 0.9 × its own (SGLang's "memory capacity is unbalanced" check).
MEMORY_BALANCE_RATIO = 0.9


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU. ``total`` is 0 when the device reports no memory."""

    type: str | None
    index: int | None
    total: int
    vendor: str | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class WorkerView:
    """An immutable worker with the GPUs a strategy may consider."""

    id: int
    name: str
    ip: str | None
    ifname: str | None
    cluster_id: int | None
    labels: Mapping[str, str]
    state: str
    reserved_ram: int
    reserved_vram: int
    ram_total: int
    is_unified_memory: bool
    gpus: tuple[Gpu, ...]

    def of_type(self, gpu_type: str | None) -> WorkerView:
        """This worker restricted to its GPUs of ``gpu_type`` (itself when all GPUs are of it)."""
        gpus = tuple(g for g in self.gpus if g.type == gpu_type)
        return self if len(gpus) == len(self.gpus) else replace(self, gpus=gpus)

    def with_gpus(self, gpus: Iterable[Gpu]) -> WorkerView:
        """A copy holding exactly ``gpus``."""
        return replace(self, gpus=tuple(gpus))


@dataclass(frozen=True, slots=True)
class Allocatable:
    """Allocatable RAM and per-GPU-index VRAM of one worker for one GPU type."""

    ram: int
    vram: Mapping[int, int] = field(default_factory=dict)


class GpuSlot(NamedTuple):
    """A GPU with the allocatable VRAM it had when the slot was taken.

    A named tuple rather than a frozen dataclass: thousands are built per
    decision and tuple construction is about twice as fast.
    """

    worker: WorkerView
    gpu: Gpu
    allocatable: int


def worker_view(worker: Worker) -> WorkerView:
    """The :class:`WorkerView` of a validated worker row, memoised on the (frozen) row."""
    cached = worker.view_cache()
    if isinstance(cached, WorkerView):
        return cached
    view = _build_view(worker)
    worker.remember_view(view)
    return view


def _build_view(worker: Worker) -> WorkerView:
    status = worker.status
    reserved = worker.system_reserved
    memory = status.memory if status else None
    gpus = tuple(
        Gpu(
            type=device.type,
            index=device.index,
            total=device.memory.total if device.memory else 0,
            vendor=device.vendor,
            name=device.name,
        )
        for device in ((status.gpu_devices if status else None) or ())
    )
    return WorkerView(
        id=worker.id,
        name=worker.name,
        ip=worker.ip,
        ifname=worker.ifname,
        cluster_id=worker.cluster_id,
        labels=MappingProxyType(dict(worker.labels)),
        state=worker.state,
        reserved_ram=reserved.ram if reserved else 0,
        reserved_vram=reserved.vram if reserved else 0,
        ram_total=memory.total if memory else 0,
        is_unified_memory=bool(memory and memory.is_unified_memory),
        gpus=gpus,
    )


def _counts_for_type(instance_type: str | None, gpu_type: str | None) -> bool:
    return gpu_type is None or instance_type is None or instance_type == gpu_type


#: A worker's memo entry: the view and instance generation its values were computed
#: for, and the values by key.
_MemoEntry = tuple[WorkerView, int, dict[object, object]]
#: A stage entry: the worker copy and instance generation an outcome was computed from.
_StageEntry = tuple[WorkerView, int, object]

_T = TypeVar("_T")


def same_objects(first: Sequence[object], second: Sequence[object]) -> bool:
    """True when both sequences hold the very same objects in the same order."""
    return len(first) == len(second) and all(map(operator.is_, first, second))


class SnapshotMemo:
    """State remembered *across* decisions on a slowly changing cluster.

    A long-lived decider (the service's worker process) keeps one and passes it
    to every ``schedule()`` call. It holds three kinds of entries, each reused
    only while the objects it was computed from are the very same objects (the
    memo holds references, so identities cannot be recycled):

    * per-worker values (allocatable resources per GPU type, spread counts),
      valid while the worker view is the same object and no instance bound to
      the worker changed: each new instance list is compared with the previous
      one, and every worker an added or removed instance occupies gets a new
      *generation*;
    * values derived from a whole worker list (the validated views of a
      snapshot, the GPU-type grouping, the fraction inputs), valid while the
      list holds the same objects in the same order;
    * per-worker strategy outcomes, keyed by the stage and every decision
      input the stage reads, valid while the worker copy is the same object and
      the worker's generation is unchanged.

    Results are byte-identical with or without a memo. Not thread-safe: one per thread.
    """

    __slots__ = ("_derived", "_entries", "_instances", "_stages", "generations")

    #: Entries kept at most per kind; beyond it that kind starts over (workers come and go).
    LIMIT = 200_000
    #: Stage tables kept at most (one per stage, distinct model shape and GPU type).
    STAGE_TABLES = 512

    def __init__(self) -> None:
        self._entries: dict[int, _MemoEntry] = {}
        self._instances: tuple[ModelInstance, ...] = ()
        self._derived: dict[object, tuple[tuple[object, ...], object]] = {}
        self._stages: dict[tuple[object, ...], StageOutcomes] = {}
        #: Per worker id, how many times its bound instances changed (absent: never).
        self.generations: dict[int, int] = {}

    def track_instances(self, instances: tuple[ModelInstance, ...]) -> None:
        """Give every worker whose bound instances changed a new generation.

        Compares ``instances`` with the list of the previous call by identity
        (the per-worker values do not depend on instance order).
        """
        previous, self._instances = self._instances, instances
        if previous is instances:
            return
        before = {id(instance) for instance in previous}
        after = {id(instance) for instance in instances}
        if len(before) != len(previous) or len(after) != len(instances):
            self._forget_workers()  # an instance object listed twice: no cheap diff
            return
        touched: set[int] = set()
        for instance in previous:
            if id(instance) not in after:
                touched.update(_occupied_workers(instance))
        for instance in instances:
            if id(instance) not in before:
                touched.update(_occupied_workers(instance))
        generations = self.generations
        for worker_id in touched:
            generations[worker_id] = generations.get(worker_id, 0) + 1

    def _forget_workers(self) -> None:
        """Drop every per-worker value and stage outcome."""
        self._entries.clear()
        self._stages.clear()
        self.generations.clear()

    def get(self, worker_id: int, key: object, view: WorkerView) -> object | None:
        """A per-worker value (``key``: a GPU type for allocatable resources, or a
        tuple naming another value) while ``view`` and the worker's generation
        are unchanged, else None."""
        entry = self._entries.get(worker_id)
        if entry is None or entry[0] is not view or entry[1] != self.generations.get(worker_id, 0):
            return None
        return entry[2].get(key)

    def put(self, worker_id: int, key: object, view: WorkerView, value: object) -> None:
        """Remember a per-worker value for this exact view and the current generation."""
        generation = self.generations.get(worker_id, 0)
        entry = self._entries.get(worker_id)
        if entry is None or entry[0] is not view or entry[1] != generation:
            if len(self._entries) >= self.LIMIT:
                self._entries.clear()
            entry = self._entries[worker_id] = (view, generation, {})
        entry[2][key] = value

    def derived(self, slot: object, items: Sequence[object], compute: Callable[[], _T]) -> _T:
        """``compute()``, reused while ``items`` holds the same objects as when it ran.

        ``slot`` names what is derived (one value per slot); ``compute`` must be a
        pure function of ``items`` and of constants the slot name captures.
        Exceptions propagate and nothing is remembered.
        """
        entry = self._derived.get(slot)
        if entry is not None and same_objects(entry[0], items):
            return entry[1]  # type: ignore[return-value]
        value = compute()
        if len(self._derived) >= 64:  # a handful of slots in use; stale ones go
            self._derived.clear()
        self._derived[slot] = (tuple(items), value)
        return value

    def stage_outcomes(self, key: tuple[object, ...]) -> StageOutcomes:
        """The per-worker outcome table of one stage (``key``: stage, decision inputs, GPU type)."""
        table = self._stages.get(key)
        if table is None:
            if len(self._stages) >= self.STAGE_TABLES:
                self._stages.clear()
            table = self._stages[key] = StageOutcomes()
        return table


class StageOutcomes:
    """One strategy's per-worker outcomes for one set of decision inputs and GPU type.

    ``entries`` maps a worker id to ``(worker copy, generation, outcome)``; an
    outcome is valid while the copy is the same object and the worker's
    generation in :attr:`SnapshotMemo.generations` is unchanged.
    """

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: dict[int, _StageEntry] = {}


class ClusterState:
    """Instances indexed by the workers they occupy, plus memoised allocatable resources."""

    __slots__ = ("_bound", "_cache", "_memo", "_workers", "instances")

    def __init__(
        self,
        workers: Sequence[WorkerView],
        instances: Sequence[ModelInstance],
        memo: SnapshotMemo | None = None,
    ) -> None:
        self._workers = {worker.id: worker for worker in workers}
        self.instances = tuple(instances)
        self._bound: dict[int, list[ModelInstance]] = defaultdict(list)
        for instance in self.instances:
            for worker_id in _occupied_workers(instance):
                self._bound[worker_id].append(instance)
        self._cache: dict[tuple[int, str | None], Allocatable] = {}
        self._memo = memo
        if memo is not None:
            memo.track_instances(self.instances)

    @property
    def memo(self) -> SnapshotMemo | None:
        """The cross-decision memo this view was built with, if any."""
        return self._memo

    def remembered_per_worker(
        self, worker_ids: Iterable[int], key: tuple[object, ...], compute: Callable[[int], _T]
    ) -> dict[int, _T]:
        """``compute(worker_id)`` for each worker: a pure function of its view and bound instances.

        With a memo each value is reused across decisions while both are
        unchanged; ``key`` names the value and every other input it depends on.
        """
        memo = self._memo
        if memo is None:
            return {worker_id: compute(worker_id) for worker_id in worker_ids}
        values: dict[int, _T] = {}
        views = self._workers
        for worker_id in worker_ids:
            view = views.get(worker_id)
            value = memo.get(worker_id, key, view) if view is not None else None
            if value is None:
                value = compute(worker_id)
                if view is not None:
                    memo.put(worker_id, key, view, value)
            values[worker_id] = value  # type: ignore[assignment]
        return values

    def instances_on(self, worker_id: int) -> Sequence[ModelInstance]:
        """Instances bound to the worker as main or as subordinate, in input order."""
        return self._bound.get(worker_id, ())

    def allocatable(self, worker: WorkerView, gpu_type: str | None) -> Allocatable:
        """GPUStack's ``get_worker_allocatable_resource`` for ``gpu_type`` (None: all types).

        Computed from the worker's full GPU list whatever copy is passed in.
        """
        key = (worker.id, gpu_type)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        full = self._workers.get(worker.id, worker)
        if self._memo is None:
            cached = self._compute(full, gpu_type)
        else:
            remembered = self._memo.get(worker.id, gpu_type, full)
            if isinstance(remembered, Allocatable):
                cached = remembered
            else:
                cached = self._compute(full, gpu_type)
                self._memo.put(worker.id, gpu_type, full, cached)
        self._cache[key] = cached
        return cached

    def _compute(self, worker: WorkerView, gpu_type: str | None) -> Allocatable:
        used_ram, used_vram = self._allocated(worker.id, gpu_type)
        vram: dict[int, int] = {}
        for gpu in worker.gpus:
            if gpu.index is None or not gpu.total:
                continue
            if gpu_type is not None and gpu.type != gpu_type:
                continue
            free = gpu.total - used_vram.get(gpu.index, 0) - worker.reserved_vram
            vram[gpu.index] = max(free, 0)
        ram = max(worker.ram_total - used_ram - worker.reserved_ram, 0)
        if worker.is_unified_memory:
            ram = max(ram - worker.reserved_vram - sum(used_vram.values()), 0)
            if 0 in vram:  # GPUStack caps index 0 only (UMA devices have one GPU)
                vram[0] = min(ram, vram[0])
        return Allocatable(ram=ram, vram=MappingProxyType(vram))

    def _allocated(self, worker_id: int, gpu_type: str | None) -> tuple[int, dict[int, int]]:
        """GPUStack's ``compute_worker_allocated``: claims of the bound instances.

        Subordinate RAM is not counted and a subordinate claim counts only when
        the *main* instance's type matches, as upstream does.
        """
        ram = 0
        vram: dict[int, int] = defaultdict(int)
        for instance in self.instances_on(worker_id):
            claim = instance.computed_resource_claim
            if instance.worker_id == worker_id and _counts_for_type(instance.gpu_type, gpu_type):
                ram += (claim.ram or 0) if claim else 0
                claimed = (claim.vram or {}) if claim else {}
                for index in instance.gpu_indexes or ():
                    vram[index] += claimed.get(index, 0)
            for sub in _subordinates(instance):
                sub_claim = sub.computed_resource_claim
                if sub.worker_id != worker_id or not sub_claim:
                    continue
                if gpu_type is None or instance.gpu_type == gpu_type:
                    for index, amount in (sub_claim.vram or {}).items():
                        vram[index] += amount
        return ram, vram


def _subordinates(instance: ModelInstance) -> Sequence[SubordinateWorker]:
    servers = instance.distributed_servers
    return (servers.subordinate_workers or ()) if servers else ()


def _occupied_workers(instance: ModelInstance) -> list[int]:
    workers: list[int] = []
    if instance.worker_id is not None:
        workers.append(instance.worker_id)
    for sub in _subordinates(instance):
        if sub.worker_id is not None and sub.worker_id not in workers:
            workers.append(sub.worker_id)
    return workers


def ram_not_enough(ram_claim: int, allocatable: Allocatable) -> bool:
    """GPUStack's ``ram_not_enough``: a positive RAM claim exceeds allocatable RAM."""
    return ram_claim > 0 and allocatable.ram < ram_claim


def group_workers_by_gpu_type(
    workers: Sequence[WorkerView],
) -> dict[str | None, list[WorkerView]]:
    """Bucket workers by GPU type; each entry holds a copy with that type's GPUs only.

    GPU-less workers go under ``None``. Types appear in first-seen order.
    """
    buckets: dict[str | None, list[WorkerView]] = {}
    for worker in workers:
        if not worker.gpus:
            buckets.setdefault(None, []).append(worker)
            continue
        for gpu_type in dict.fromkeys(g.type for g in worker.gpus):
            buckets.setdefault(gpu_type, []).append(worker.of_type(gpu_type))
    return buckets


def sort_workers_by_gpu_count(workers: Iterable[WorkerView]) -> list[WorkerView]:
    """Workers by GPU count, most first; stable (GPUStack sorts in place, we copy)."""
    return sorted(workers, key=lambda w: len(w.gpus), reverse=True)


def group_gpus_by_memory(
    workers: Sequence[WorkerView],
    cluster: ClusterState,
    ram_claim: int,
    gpu_type: str | None,
) -> list[list[GpuSlot]]:
    """GPUStack's ``group_worker_gpu_by_memory``: fixed partition of GPUs by free VRAM.

    Workers short of RAM are skipped; GPUs without an index, without memory or
    with nothing allocatable are left out. Slots are sorted ascending by
    allocatable and cut greedily: a GPU joins the current group while the
    group's first (smallest) member has at least 0.9 × its allocatable.
    """
    slots: list[GpuSlot] = []
    for worker in workers:
        allocatable = cluster.allocatable(worker, gpu_type)
        if ram_not_enough(ram_claim, allocatable):
            continue
        for gpu in worker.gpus:
            free = allocatable.vram.get(gpu.index, 0) if gpu.index is not None else 0
            if gpu.index is not None and gpu.total and free > 0:
                slots.append(GpuSlot(worker, gpu, free))
    slots.sort(key=lambda slot: slot.allocatable)
    groups: list[list[GpuSlot]] = []
    for slot in slots:
        if groups and groups[-1][0].allocatable >= slot.allocatable * MEMORY_BALANCE_RATIO:
            groups[-1].append(slot)
        else:
            groups.append([slot])
    return groups


def sort_gpu_indexes_by_allocatable_rate(
    worker: WorkerView, allocatable: Mapping[int, int], gpu_type: str | None
) -> list[int]:
    """Indexes of the worker's GPUs, most free (allocatable/total) first; stable.

    GPUs of another type rate 0, as upstream.
    """

    def rate(gpu: Gpu) -> float:
        if gpu.type != gpu_type or not gpu.total or gpu.index is None:
            return 0.0
        return allocatable.get(gpu.index, 0) / gpu.total

    ordered = sorted(worker.gpus, key=rate, reverse=True)
    return [gpu.index for gpu in ordered if gpu.index is not None]
