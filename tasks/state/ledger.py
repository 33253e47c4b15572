"""The claims ledger's arithmetic: capacities and claims per GPU, as the core counts them.

A GPU is keyed ``<worker_id>:<gpu_type>:<index>``. Its *capacity* is what the
core treats as allocatable on an empty GPU (``total − system_reserved.vram``);
an instance's *claims* are the bytes the core subtracts for it when it
computes a GPU's allocatable memory: the main worker's
``computed_resource_claim.vram`` for each of its ``gpu_indexes``, and every
subordinate's whole ``vram`` map under the instance's GPU type. An instance
without a GPU type counts, like in the core, against every GPU type of its
worker at that index (its subordinates then count nowhere). The reservation
script books an instance only if ``booked + claim ≤ capacity`` for every GPU
it touches, so the ledger never books past what the core calls allocatable.

This module is the service's one copy of the core's per-GPU claims
accounting (capacity, claims, occupied workers): every other module of the
service asks it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from scheduler_core import ModelInstance, Worker


def gpu_key(worker_id: int, gpu_type: str | None, index: int) -> str:
    """The ledger key of one GPU."""
    return f"{worker_id}:{gpu_type or ''}:{index}"


def worker_capacity(worker: Worker) -> dict[str, int]:
    """Bookable bytes per GPU of ``worker`` (GPUs without index or memory are not bookable).

    A later device with the same (type, index) replaces an earlier one, as in the core.
    """
    reserved = worker.system_reserved.vram if worker.system_reserved else 0
    devices = (worker.status.gpu_devices if worker.status else None) or ()
    capacity: dict[str, int] = {}
    for device in devices:
        total = device.memory.total if device.memory else 0
        if device.index is None or not total:
            continue
        capacity[gpu_key(worker.id, device.type, device.index)] = max(total - reserved, 0)
    return capacity


def worker_gpu_types(worker: Worker) -> tuple[str | None, ...]:
    """The worker's GPU types in first-seen order."""
    devices = (worker.status.gpu_devices if worker.status else None) or ()
    return tuple(dict.fromkeys(device.type for device in devices))


def instance_claims(instance: ModelInstance, gpu_types: Mapping[int, Iterable[str | None]]) -> dict[str, int]:
    """Bytes the instance holds per GPU key (zero claims are kept: they still occupy the GPU).

    Args:
        instance: the instance row.
        gpu_types: GPU types per worker id, used only for instances without a GPU type.
    """
    claims: dict[str, int] = defaultdict(int)
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
                claims[gpu_key(instance.worker_id, gpu_type, index)] += vram.get(index, 0)
    if instance.gpu_type is None:
        return dict(claims)
    servers = instance.distributed_servers
    for sub in (servers.subordinate_workers or ()) if servers else ():
        sub_claim = sub.computed_resource_claim
        if sub.worker_id is None or sub_claim is None:
            continue
        for index, amount in (sub_claim.vram or {}).items():
            claims[gpu_key(sub.worker_id, instance.gpu_type, index)] += amount
    return dict(claims)


def occupied_workers(instance: ModelInstance) -> list[int]:
    """Worker ids the instance runs on: the main worker first, then its subordinates."""
    workers: list[int] = []
    if instance.worker_id is not None:
        workers.append(instance.worker_id)
    servers = instance.distributed_servers
    for sub in (servers.subordinate_workers or ()) if servers else ():
        if sub.worker_id is not None and sub.worker_id not in workers:
            workers.append(sub.worker_id)
    return workers


def encode_amounts(amounts: Mapping[str, int]) -> str:
    """``key=bytes;key=bytes`` in key order: the wire form the Lua scripts parse."""
    return ";".join(f"{key}={int(amounts[key])}" for key in sorted(amounts))


def decode_amounts(encoded: str) -> dict[str, int]:
    """Inverse of :func:`encode_amounts`."""
    amounts: dict[str, int] = {}
    for part in filter(None, encoded.split(";")):
        key, _, value = part.rpartition("=")
        amounts[key] = int(value)
    return amounts


def overbooked(capacity: Mapping[str, int], booked: Mapping[str, int]) -> dict[str, tuple[int, int]]:
    """GPUs whose booked bytes exceed their capacity: key → (booked, capacity)."""
    return {
        key: (amount, capacity[key])
        for key, amount in booked.items()
        if key in capacity and amount > capacity[key]
    }
