"""The claims ledger's arithmetic: capacities and claims per GPU, as the core counts them.

A GPU is keyed ``<worker_id>:<gpu_type>:<index>``. Capacities and claims are
the core's own arithmetic (:mod:`scheduler_core.accounting`, through its public
``gpu_capacity`` and ``instance_claims``): a GPU's *capacity* is what the core
treats as allocatable on the empty worker (``total − system_reserved.vram``,
capped by RAM on a unified-memory worker); an instance's *claims* are the
bytes the core subtracts for it. The reservation script books an instance only
if ``booked + claim ≤ capacity`` for every GPU it touches, so the ledger never
books past what the core calls allocatable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduler_core import ModelInstance, Worker, gpu_capacity, occupied_workers
from scheduler_core import instance_claims as core_instance_claims

__all__ = [
    "decode_amounts",
    "encode_amounts",
    "gpu_key",
    "instance_claims",
    "occupied_workers",
    "overbooked",
    "worker_capacity",
    "worker_gpu_types",
]


def gpu_key(worker_id: int, gpu_type: str | None, index: int) -> str:
    """The ledger key of one GPU."""
    return f"{worker_id}:{gpu_type or ''}:{index}"


def worker_capacity(worker: Worker) -> dict[str, int]:
    """Bookable bytes per GPU of ``worker``: the core's allocatable on the empty worker
    (:func:`scheduler_core.gpu_capacity`; GPUs without index or memory are not bookable)."""
    return {gpu_key(*key): amount for key, amount in gpu_capacity(worker).items()}


def worker_gpu_types(worker: Worker) -> tuple[str | None, ...]:
    """The worker's GPU types in first-seen order."""
    devices = (worker.status or {}).get("gpu_devices") or ()
    return tuple(dict.fromkeys(device.get("type") for device in devices))


def instance_claims(instance: ModelInstance, gpu_types: Mapping[int, Iterable[str | None]]) -> dict[str, int]:
    """Bytes the instance holds per GPU key, as the core counts them
    (:func:`scheduler_core.instance_claims`)."""
    return {gpu_key(*key): amount for key, amount in core_instance_claims(instance, gpu_types).items()}


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
