"""The claims ledger's arithmetic: capacities and claims per GPU, as the core counts them.

A GPU is keyed ``<worker_id>:<gpu_type>:<index>``: the worker id and the
index are integers, so the type is everything between the first and the last
colon and no two GPUs share a key, whatever their type contains. Capacities and claims are
the core's own arithmetic (:mod:`scheduler_core.accounting`, through its public
``gpu_capacity`` and ``instance_claims``): a GPU's *capacity* is what the core
treats as allocatable on the empty worker (``total − system_reserved.vram``,
capped by RAM on a unified-memory worker); an instance's *claims* are the
bytes the core subtracts for it. The reservation script books an instance only
if ``booked + claim ≤ capacity`` for every GPU it touches, so the ledger never
books past what the core calls allocatable.

Every list the Lua scripts parse (claims, capacities, a worker's GPU keys,
request ids) travels and is stored as a JSON array of strings
(:func:`encode_amounts`, :func:`encode_keys`), decoded with ``cjson`` —
never joined with separators — so no character of a GPU type, a name or an
id can end one entry and start another. Byte amounts are decimal strings:
``cjson`` reads JSON numbers as doubles, exact only up to 2**53.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from scheduler_core import ModelInstance, Worker, gpu_capacity, occupied_workers
from scheduler_core import instance_claims as core_instance_claims

__all__ = [
    "decode_amounts",
    "encode_amounts",
    "encode_keys",
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
    return tuple(dict.fromkeys(gpu.type for gpu in worker.gpus))


def instance_claims(instance: ModelInstance, gpu_types: Mapping[int, Iterable[str | None]]) -> dict[str, int]:
    """Bytes the instance holds per GPU key, as the core counts them
    (:func:`scheduler_core.instance_claims`)."""
    return {gpu_key(*key): amount for key, amount in core_instance_claims(instance, gpu_types).items()}


def encode_amounts(amounts: Mapping[str, int]) -> str:
    """``[["<gpu key>", "<bytes>"], ...]`` in key order: the wire and stored form the Lua scripts decode.

    Raises:
        ValueError: a negative amount (the scripts add and compare unsigned decimals).
    """
    pairs = []
    for key in sorted(amounts):
        amount = int(amounts[key])
        if amount < 0:
            raise ValueError(f"negative amount {amount} for {key!r}")
        pairs.append([key, str(amount)])
    return json.dumps(pairs, ensure_ascii=False, separators=(",", ":"))


def decode_amounts(encoded: str) -> dict[str, int]:
    """Inverse of :func:`encode_amounts` (also of an empty string: nothing held).

    Raises:
        ValueError: not a list of ``[key, decimal]`` pairs.
    """
    if not encoded:
        return {}
    pairs = json.loads(encoded)
    if not isinstance(pairs, list) or not all(_is_pair(pair) for pair in pairs):
        raise ValueError(f"not an encoded amounts list: {encoded[:80]!r}")
    return {key: int(amount) for key, amount in pairs}


def encode_keys(keys: Iterable[str]) -> str:
    """``["key", ...]`` in the given order: a list of ids or keys as the Lua scripts decode it."""
    return json.dumps(list(keys), ensure_ascii=False, separators=(",", ":"))


def _is_pair(pair: object) -> bool:
    return (
        isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)
        and isinstance(pair[1], str) and pair[1].isascii() and pair[1].isdigit()
    )


def overbooked(capacity: Mapping[str, int], booked: Mapping[str, int]) -> dict[str, tuple[int, int]]:
    """GPUs whose booked bytes exceed their capacity: key → (booked, capacity)."""
    return {
        key: (amount, capacity[key])
        for key, amount in booked.items()
        if key in capacity and amount > capacity[key]
    }
