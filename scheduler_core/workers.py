"""The core's immutable view of a worker and its GPUs.

A :class:`WorkerView` holds exactly what placement reads of a GPUStack
``Worker`` row. A strategy may hold a copy restricted to some GPUs
(:meth:`WorkerView.of_type`, :meth:`WorkerView.with_gpus`); every copy owns its
GPU tuple, so no copy can corrupt another (unlike GPUStack's shallow copies in
``policies/utils.py: group_workers_by_gpu_type``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from scheduler_core._schemas import Worker


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
