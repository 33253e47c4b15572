"""A per-decision view of the cluster: workers, what their instances hold, what is left.

Allocatable memory is :mod:`scheduler_core.accounting`'s arithmetic over the
instances bound to each worker. The view is built once per decision in
O(instances) and computes each worker's allocatable resources once per GPU
type. A caching layer (:class:`WorkerValues`, implemented by
:class:`scheduler_core.memo.SnapshotMemo`) may supply per-worker values
remembered from earlier decisions; the view never decides what to reuse.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Protocol, TypeVar

from scheduler_core._schemas import ModelInstance
from scheduler_core.accounting import Allocatable, Holding, allocatable, held, holdings
from scheduler_core.workers import Gpu, WorkerView

#: GPUStack's memory-balance rule: a GPU joins a group when the group's smallest
#: allocatable is at least 0.9 × its own (``policies/utils.py: group_worker_gpu_by_memory``).
MEMORY_BALANCE_RATIO = 0.9

#: The claims of a worker without instances.
_NOTHING: Mapping[int, int] = MappingProxyType({})

_T = TypeVar("_T")
_S = TypeVar("_S")


#: Per worker id, the instances bound to it (input order) and what each holds there.
InstanceIndex = tuple[dict[int, list[ModelInstance]], dict[int, list[Holding]]]


def index_instances(instances: Iterable[ModelInstance], index: InstanceIndex | None = None) -> InstanceIndex:
    """Add ``instances``, in order, to ``index`` (a new one when None) and return it.

    An instance is bound once to each worker it occupies; its holdings there are
    listed in :func:`~scheduler_core.accounting.holdings` order.
    """
    bound, held = index if index is not None else (defaultdict(list), defaultdict(list))
    for instance in instances:
        for worker_id, holding in holdings(instance):
            held_here = held[worker_id]
            if not held_here or bound[worker_id][-1] is not instance:
                bound[worker_id].append(instance)
            held_here.append(holding)
    return bound, held


class WorkerValues(Protocol):
    """Per-worker values kept across decisions, valid while a worker and its instances are unchanged."""

    def track_instances(self, instances: tuple[ModelInstance, ...]) -> InstanceIndex | None:
        """Note the decision's instances (workers whose instances changed lose their values);
        returns their :func:`index_instances` when it keeps one (read it, never change it)."""
        ...

    def running_models(self) -> Mapping[int | None, int]:
        """Instances per model id among the instances of the last ``track_instances``."""
        ...

    def model_hosts(self, model_id: int | None) -> Collection[int]:
        """The workers the instances of ``model_id`` are bound to, among those instances."""
        ...

    def by_id(self, views: Sequence[WorkerView]) -> Mapping[int, WorkerView]:
        """``views`` by worker id, kept while they are the same objects (read it, never change it)."""
        ...

    def get(self, worker_id: int, key: object, view: WorkerView) -> object | None:
        """A value remembered for this exact worker view, or None."""
        ...

    def put(self, worker_id: int, key: object, view: WorkerView, value: object) -> None:
        """Remember a value for this exact worker view."""
        ...

    def worker_values(
        self,
        slot: Hashable,
        views: Sequence[WorkerView],
        worker_ids: Sequence[int],
        compute: Callable[[int], _T],
    ) -> dict[int, _T]:
        """``compute(worker_id)`` per worker (a pure function of its view and bound instances),
        kept while the worker and ``views`` are unchanged."""
        ...

    def kept(self, slot: Hashable, items: Sequence[object], build: Callable[[], _T], weight: int = 1) -> _T:
        """An object its user brings up to date on every use, kept per ``slot`` while ``items``
        holds the same objects (``weight``: the memory it holds, in its user's unit)."""
        ...

    def item_values(
        self,
        slot: Hashable,
        views: Sequence[WorkerView],
        items: Sequence[_S],
        worker_of: Callable[[_S], int],
        compute: Callable[[Sequence[_S]], list[_T]],
    ) -> list[_T]:
        """``compute(items)``, each item's value (a pure function of the item and its worker's
        view and bound instances) kept while that worker and ``views`` are unchanged."""
        ...


class ClusterState:
    """Instances indexed by the workers they occupy, and each worker's allocatable resources."""

    __slots__ = ("_bound", "_computed", "_held", "_models", "_remembered", "_views", "_workers", "instances")

    def __init__(
        self,
        workers: Sequence[WorkerView],
        instances: Sequence[ModelInstance],
        remembered: WorkerValues | None = None,
    ) -> None:
        self._views = workers
        self._workers: Mapping[int, WorkerView] = (
            {worker.id: worker for worker in workers} if remembered is None else remembered.by_id(workers)
        )
        # a tuple is kept as itself (a memo compares it with the last one by identity first)
        self.instances = instances if isinstance(instances, tuple) else tuple(instances)
        index = remembered.track_instances(self.instances) if remembered is not None else None
        # Only read through .get below: the index may be the memo's, shared across decisions.
        self._bound, self._held = index if index is not None else index_instances(self.instances)
        self._computed: dict[tuple[int, str | None], Allocatable] = {}
        self._remembered = remembered
        self._models: set[int | None] | None = None

    def runs_model(self, model_id: int | None) -> bool:
        """Whether any instance of the cluster belongs to ``model_id``."""
        if self._remembered is not None:
            return self._remembered.running_models().get(model_id, 0) > 0
        if self._models is None:
            self._models = {instance.model_id for instance in self.instances}
        return model_id in self._models

    def model_hosts(self, model_id: int | None) -> Collection[int]:
        """The workers an instance of ``model_id`` is bound to (as main or subordinate)."""
        if self._remembered is not None:
            return self._remembered.model_hosts(model_id)
        return {worker_id for worker_id, instances in self._bound.items()
                if any(instance.model_id == model_id for instance in instances)}

    def instances_on(self, worker_id: int) -> Sequence[ModelInstance]:
        """Instances bound to the worker as main or as subordinate, in input order."""
        return self._bound.get(worker_id, ())

    def allocatable(self, worker: WorkerView, gpu_type: str | None) -> Allocatable:
        """GPUStack's ``get_worker_allocatable_resource`` for ``gpu_type`` (None: all types).

        Computed from the worker's full GPU list whatever copy is passed in.
        """
        key = (worker.id, gpu_type)
        known = self._computed.get(key)
        if known is None:
            full = self._workers.get(worker.id, worker)
            known = (
                self._allocatable(full, gpu_type)
                if self._remembered is None
                else self._per_worker(full, gpu_type, lambda: self._allocatable(full, gpu_type))
            )
            self._computed[key] = known
        return known

    def per_worker(
        self, worker_ids: Iterable[int], key: tuple[object, ...], compute: Callable[[int], _T]
    ) -> dict[int, _T]:
        """``compute(worker_id)`` for each worker: a pure function of its view and bound instances.

        ``key`` names the value and every other input it depends on.
        """
        remembered = self._remembered
        if remembered is not None:
            ids = list(worker_ids)
            if all(map(self._workers.__contains__, ids)):
                return remembered.worker_values(key, self._views, ids, compute)
            worker_ids = ids
        values: dict[int, _T] = {}
        for worker_id in worker_ids:
            view = self._workers.get(worker_id)
            if remembered is None or view is None:
                values[worker_id] = compute(worker_id)
                continue
            value = remembered.get(worker_id, key, view)
            if value is None:
                value = compute(worker_id)
                remembered.put(worker_id, key, view, value)
            values[worker_id] = value  # type: ignore[assignment]
        return values

    def per_item(
        self,
        slot: Hashable,
        items: Sequence[_S],
        worker_of: Callable[[_S], int],
        compute: Callable[[Sequence[_S]], list[_T]],
    ) -> list[_T]:
        """``compute(items)``: per item, a pure function of the item, of the view and bound
        instances of the worker ``worker_of(item)`` and of what ``slot`` names (never None);
        with a memo, the values of items seen in earlier decisions are reused.
        """
        remembered = self._remembered
        if remembered is None:
            return compute(items)
        return remembered.item_values(slot, self._views, items, worker_of, compute)

    def kept(
        self, slot: Hashable, items: Sequence[object], build: Callable[[], _T], weight: int = 1
    ) -> _T | None:
        """With a memo, the object it keeps per ``slot`` while ``items`` holds the same objects
        (``build`` makes a new one); None without a memo (nothing lasts past this decision).

        The object is its user's: it must hold nothing but what ``slot`` and ``items``
        determine, and its user brings it up to date with this decision's cluster on every use.
        ``weight``: the memory it holds, in its user's unit (the memo keeps a bounded weight).
        """
        remembered = self._remembered
        return None if remembered is None else remembered.kept(slot, items, build, weight)

    def per_own_worker(self, worker: WorkerView, key: object, compute: Callable[[], _T]) -> _T:
        """``compute()``, a pure function of the worker's view and bound instances and of what
        ``key`` names; with a memo, kept while both are unchanged. Kept only for this state's
        own view of the worker: a copy (one GPU type of a worker with several) is computed
        each time, so that it never displaces what the memo keeps for the worker itself."""
        if self._remembered is None or self._workers.get(worker.id) is not worker:
            return compute()
        return self._per_worker(worker, key, compute)

    def _per_worker(self, view: WorkerView, key: object, compute: Callable[[], _T]) -> _T:
        remembered = self._remembered
        if remembered is None:
            return compute()
        value = remembered.get(view.id, key, view)
        if value is None:
            value = compute()
            remembered.put(view.id, key, view, value)
        return value  # type: ignore[return-value]

    def _allocatable(self, worker: WorkerView, gpu_type: str | None) -> Allocatable:
        on_worker = self._held.get(worker.id)
        if not on_worker:
            return allocatable(worker, gpu_type, 0, _NOTHING)
        used_ram, used_vram = held(gpu_type, on_worker)
        return allocatable(worker, gpu_type, used_ram, used_vram)


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
        types = dict.fromkeys(map(_GPU_TYPE, worker.gpus))
        if len(types) == 1:  # the common case: the worker itself is its one type's copy
            buckets.setdefault(next(iter(types)), []).append(worker)
            continue
        for gpu_type in types:
            buckets.setdefault(gpu_type, []).append(worker.of_type(gpu_type))
    return buckets


_GPU_TYPE = operator.attrgetter("type")


def sort_workers_by_gpu_count(workers: Iterable[WorkerView]) -> list[WorkerView]:
    """Workers by GPU count, most first; stable (GPUStack sorts in place, we copy)."""
    return sorted(workers, key=lambda w: len(w.gpus), reverse=True)


def balanced_groups(items: Iterable[_S], free: Callable[[_S], int]) -> list[list[_S]]:
    """The 0.9 memory-balance partition: items sorted ascending by ``free`` (stable) and
    cut greedily, an item joining the current group while the group's first (smallest)
    member has at least 0.9 × its free memory."""
    ordered = sorted(items, key=free)
    groups: list[list[_S]] = []
    for item in ordered:
        if groups and free(groups[-1][0]) >= free(item) * MEMORY_BALANCE_RATIO:
            groups[-1].append(item)
        else:
            groups.append([item])
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


def gpu_rate(allocatable: Mapping[int, int], gpu: Gpu) -> float:
    """Allocatable share of a GPU (0 for a GPU without memory or index)."""
    if not gpu.total or gpu.index is None:
        return 0.0
    return allocatable.get(gpu.index, 0) / gpu.total
