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
* each instance row is read once (:func:`holdings`), then summed per worker
  and type (:func:`held`);
* allocatable = total − claims − ``system_reserved`` (per GPU for VRAM),
  never below 0; on a unified-memory worker VRAM comes out of RAM, so RAM is
  reduced by reserved and claimed VRAM and GPU 0 is capped by what RAM is left.

Deliberate difference: every look-up is keyed by GPU type *and* index, so
``cuda:0`` and ``rocm:0`` on one worker never collide (upstream keys by index).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

from scheduler_core._schemas import ModelInstance, SubordinateWorker, Worker
from scheduler_core.workers import WorkerView, build_view


class Allocatable(NamedTuple):
    """Allocatable RAM and per-GPU-index VRAM of one worker for one GPU type.

    A named tuple: one per worker and GPU type of every cold decision.
    """

    ram: int
    vram: Mapping[int, int]


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


class Holding(NamedTuple):
    """What one instance holds on one worker, read once from the row.

    ``main`` tells a main-worker holding (its RAM counts, its VRAM counts for the
    instance's type or for every type when untyped) from a subordinate one (VRAM
    only, under the instance's own type).
    """

    main: bool
    instance_type: str | None
    ram: int
    vram: tuple[tuple[int, int], ...]


def holdings(instance: ModelInstance) -> list[tuple[int, Holding]]:
    """Per occupied worker id, what ``instance`` holds there (as :func:`held` counts it)."""
    # Read once per instance and decision (4,000 rows at scale): attributes read once.
    found: list[tuple[int, Holding]] = []
    worker_id, gpu_type = instance.worker_id, instance.gpu_type
    if worker_id is not None:
        claim = instance.computed_resource_claim
        claimed = (claim.vram or _NO_VRAM) if claim else _NO_VRAM
        vram = _main_vram(instance.gpu_indexes or (), claimed)
        ram = (claim.ram or 0) if claim else 0
        found.append((worker_id, _new_holding(Holding, (True, gpu_type, ram, vram))))
    servers = instance.distributed_servers
    for sub in (servers.subordinate_workers or ()) if servers else ():
        sub_claim = sub.computed_resource_claim
        if sub.worker_id is not None and sub_claim:
            vram = tuple((sub_claim.vram or _NO_VRAM).items())
            found.append((sub.worker_id, _new_holding(Holding, (False, gpu_type, 0, vram))))
    return found


_new_holding = tuple.__new__


def _main_vram(indexes: Sequence[int], claimed: Mapping[int, int]) -> tuple[tuple[int, int], ...]:
    """(index, claimed bytes, 0 when unclaimed) for each of ``indexes``, in their order."""
    if len(claimed) == len(indexes) and list(claimed) == list(indexes):  # the claim's own order
        return tuple(claimed.items())
    return tuple([(index, claimed.get(index, 0)) for index in indexes])


_NO_VRAM: Mapping[int, int] = MappingProxyType({})


def held(gpu_type: str | None, on_worker: Iterable[Holding]) -> tuple[int, dict[int, int]]:
    """RAM and VRAM per GPU index that the holdings on one worker count for ``gpu_type``."""
    ram = 0
    vram: dict[int, int] = {}
    for main, typed, held_ram, held_vram in on_worker:  # a Holding's fields, in order
        if main:
            if gpu_type is not None and typed is not None and typed != gpu_type:
                continue  # an untyped instance's main claims count for every type
            ram += held_ram
        elif gpu_type is not None and typed != gpu_type:
            continue
        for index, amount in held_vram:
            vram[index] = vram.get(index, 0) + amount
    return ram, vram


def allocatable(
    worker: WorkerView, gpu_type: str | None, used_ram: int, used_vram: Mapping[int, int]
) -> Allocatable:
    """What is left on the worker's GPUs of ``gpu_type`` (None: all) after the claims.

    GPUs without an index or without memory are not allocatable (they are absent).
    """
    vram: dict[int, int] = {}
    reserved = worker.reserved_vram
    used = used_vram.get
    # Once per worker and GPU type of every decision: the GPU's fields unpacked in one step.
    for kind, index, total, _vendor, _name, _used, _unified in worker.gpus:
        if index is None or not total or (gpu_type is not None and kind != gpu_type):
            continue
        free = total - used(index, 0) - reserved
        vram[index] = free if free > 0 else 0
    ram = max(worker.ram_total - used_ram - worker.reserved_ram, 0)
    if worker.is_unified_memory:
        ram = max(ram - worker.reserved_vram - sum(used_vram.values()), 0)
        if 0 in vram:  # GPUStack caps index 0 only (a unified-memory device has one GPU)
            vram[0] = min(ram, vram[0])
    return _new_allocatable(Allocatable, (ram, MappingProxyType(vram)))


_new_allocatable = tuple.__new__


#: A GPU as the ledger keys it: (worker id, GPU type, index).
GpuKey = tuple[int, str | None, int]


def gpu_capacity(worker: Worker) -> dict[GpuKey, int]:
    """Bytes bookable on each GPU of an empty ``worker``: its allocatable with no claims.

    A later device with the same (type, index) replaces an earlier one (the
    core rejects such a worker in a request; the ledger must still account for it).
    """
    view = build_view(worker)
    capacity: dict[GpuKey, int] = {}
    for gpu_type in dict.fromkeys(g.type for g in view.gpus):
        for index, amount in allocatable(view, gpu_type, 0, {}).vram.items():
            capacity[(view.id, gpu_type, index)] = amount
    return capacity


def instance_claims(
    instance: ModelInstance, gpu_types: Mapping[int, Iterable[str | None]]
) -> dict[GpuKey, int]:
    """Bytes the instance holds per GPU, as :func:`held` counts them.

    Zero claims are kept (the instance still occupies the GPU).

    Args:
        instance: the instance row.
        gpu_types: GPU types per worker id; an untyped instance's main claims count
            against every type of its worker at that index (its subordinates count nowhere).
    """
    claims: dict[GpuKey, int] = {}
    for worker_id, holding in holdings(instance):
        if holding.instance_type is not None:
            types: Iterable[str | None] = (holding.instance_type,)
        elif holding.main:
            types = tuple(gpu_types.get(worker_id, ()))
        else:
            continue
        for index, amount in holding.vram:
            for gpu_type in types:
                key = (worker_id, gpu_type, index)
                claims[key] = claims.get(key, 0) + amount
    return claims
