"""The claims arithmetic: what instances hold and what is left, per worker and GPU.

The one place that says how claims count (``gpustack/policies/utils.py:
compute_worker_allocated`` and ``get_worker_allocatable_resource``), used by
the core's cluster view and by the service's claims ledger:

* an instance holds, on its main worker, its ``computed_resource_claim.vram``
  for each of its ``gpu_indexes`` and its claimed RAM; on each subordinate
  worker, that subordinate's whole ``vram`` map (its RAM is not counted);
* claims count per GPU *type*: a main-worker claim counts for a type when the
  instance has no GPU type or the same one; a subordinate claim counts only
  under the instance's own type (an untyped instance's subordinates count only
  when no type is asked for);
* allocatable = total − claims − ``system_reserved`` (per GPU for VRAM),
  never below 0; on a unified-memory worker VRAM comes out of RAM, so RAM is
  reduced by reserved and claimed VRAM and GPU 0 is capped by what RAM is left.

Deliberate difference: every look-up is keyed by GPU type *and* index, so
``cuda:0`` and ``rocm:0`` on one worker never collide (upstream keys by index).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from scheduler_core._schemas import ModelInstance, SubordinateWorker, Worker
from scheduler_core.workers import WorkerView, worker_view


@dataclass(frozen=True, slots=True)
class Allocatable:
    """Allocatable RAM and per-GPU-index VRAM of one worker for one GPU type."""

    ram: int
    vram: Mapping[int, int] = field(default_factory=dict)


def subordinates(instance: ModelInstance) -> Sequence[SubordinateWorker]:
    """The follower nodes of a distributed instance (empty otherwise)."""
    servers = instance.distributed_servers
    return (servers.subordinate_workers or ()) if servers else ()


def occupied_workers(instance: ModelInstance) -> list[int]:
    """Worker ids the instance runs on: the main worker first, then its subordinates."""
    workers: list[int] = []
    if instance.worker_id is not None:
        workers.append(instance.worker_id)
    for sub in subordinates(instance):
        if sub.worker_id is not None and sub.worker_id not in workers:
            workers.append(sub.worker_id)
    return workers


def counts_for_type(instance_type: str | None, gpu_type: str | None) -> bool:
    """Whether a main-worker claim of an ``instance_type`` instance counts for ``gpu_type``."""
    return gpu_type is None or instance_type is None or instance_type == gpu_type


def claimed_on(
    worker_id: int, gpu_type: str | None, instances: Iterable[ModelInstance]
) -> tuple[int, dict[int, int]]:
    """RAM and VRAM per GPU index that ``instances`` hold on the worker, for ``gpu_type``.

    ``instances`` should be those occupying the worker (others add nothing).
    """
    ram = 0
    vram: dict[int, int] = defaultdict(int)
    for instance in instances:
        claim = instance.computed_resource_claim
        if instance.worker_id == worker_id and counts_for_type(instance.gpu_type, gpu_type):
            ram += (claim.ram or 0) if claim else 0
            claimed = (claim.vram or {}) if claim else {}
            for index in instance.gpu_indexes or ():
                vram[index] += claimed.get(index, 0)
        if gpu_type is not None and instance.gpu_type != gpu_type:
            continue
        for sub in subordinates(instance):
            sub_claim = sub.computed_resource_claim
            if sub.worker_id == worker_id and sub_claim:
                for index, amount in (sub_claim.vram or {}).items():
                    vram[index] += amount
    return ram, vram


def allocatable(
    worker: WorkerView, gpu_type: str | None, used_ram: int, used_vram: Mapping[int, int]
) -> Allocatable:
    """What is left on the worker's GPUs of ``gpu_type`` (None: all) after the claims.

    GPUs without an index or without memory are not allocatable (they are absent).
    """
    vram: dict[int, int] = {}
    for gpu in worker.gpus:
        if gpu.index is None or not gpu.total:
            continue
        if gpu_type is not None and gpu.type != gpu_type:
            continue
        vram[gpu.index] = max(gpu.total - used_vram.get(gpu.index, 0) - worker.reserved_vram, 0)
    ram = max(worker.ram_total - used_ram - worker.reserved_ram, 0)
    if worker.is_unified_memory:
        ram = max(ram - worker.reserved_vram - sum(used_vram.values()), 0)
        if 0 in vram:  # GPUStack caps index 0 only (a unified-memory device has one GPU)
            vram[0] = min(ram, vram[0])
    return Allocatable(ram=ram, vram=MappingProxyType(vram))


#: A GPU as the ledger keys it: (worker id, GPU type, index).
GpuKey = tuple[int, str | None, int]


def gpu_capacity(worker: Worker) -> dict[GpuKey, int]:
    """Bytes bookable on each GPU of an empty ``worker``: its allocatable with no claims.

    A later device with the same (type, index) replaces an earlier one.
    """
    view = worker_view(worker)
    capacity: dict[GpuKey, int] = {}
    for gpu_type in dict.fromkeys(g.type for g in view.gpus):
        for index, amount in allocatable(view, gpu_type, 0, {}).vram.items():
            capacity[(view.id, gpu_type, index)] = amount
    return capacity


def instance_claims(
    instance: ModelInstance, gpu_types: Mapping[int, Iterable[str | None]]
) -> dict[GpuKey, int]:
    """Bytes the instance holds per GPU, as :func:`claimed_on` counts them.

    Zero claims are kept (the instance still occupies the GPU).

    Args:
        instance: the instance row.
        gpu_types: GPU types per worker id; an untyped instance's main claims count
            against every type of its worker at that index.
    """
    claims: dict[GpuKey, int] = defaultdict(int)
    claim = instance.computed_resource_claim
    vram = (claim.vram or {}) if claim else {}
    if instance.worker_id is not None:
        types = (
            (instance.gpu_type,)
            if instance.gpu_type is not None
            else tuple(gpu_types.get(instance.worker_id, ()))
        )
        for index in instance.gpu_indexes or ():
            for gpu_type in types:
                claims[(instance.worker_id, gpu_type, index)] += vram.get(index, 0)
    if instance.gpu_type is None:
        return dict(claims)
    for sub in subordinates(instance):
        sub_claim = sub.computed_resource_claim
        if sub.worker_id is None or sub_claim is None:
            continue
        for index, amount in (sub_claim.vram or {}).items():
            claims[(sub.worker_id, instance.gpu_type, index)] += amount
    return dict(claims)
