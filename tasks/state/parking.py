"""Parking reasons and wake rules, derived from the core's plugins.

A request that fits nowhere is parked with the reason codes that blocked it:
the blocking filter's :class:`~scheduler_core.Reason` or the strategies'
reasons, plus the service's own (``overcommit``: a pick the ledger will not
book; ``conflict_retries_exhausted``; ``no_candidate``). Which kind of
cluster change can clear which reason comes from the plugins' own
declarations (:func:`scheduler_core.chain_wake_table`, kube-scheduler's
``EventsToRegister``), and whether a changed worker could serve the request
from the chain's own filters (:func:`scheduler_core.worker_admits`): the
service keeps no copy of either rule. A parked request is woken only when one
of its reasons is among those the change clears *and* a changed worker passes
the filters for it. Unknown reason codes are woken by every change: a request
may be woken in vain, never forgotten.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from scheduler_core import (
    MORE_CAPACITY,
    Chain,
    ClusterChange,
    GpuFloor,
    ModelInstance,
    ModelSpec,
    Reason,
    ScheduleResult,
    Worker,
    chain_wake_table,
    gpu_capacity,
    instance_claims,
    worker_admits,
)
from tasks.base.rows import row_json
from tasks.state.ledger import gpu_key, worker_capacity

#: The service's reason for an overcommitted pick the ledger will not book.
OVERCOMMIT_REASON = Reason.OVERCOMMIT.value
#: The service's reason for a request whose reservation attempts all conflicted.
CONFLICT_REASON = Reason.CONFLICT_RETRIES_EXHAUSTED.value
#: The service's reason when a result names no blocking code at all.
NO_CANDIDATE_REASON = Reason.NO_CANDIDATE.value
#: The service's own reasons: more capacity may clear each.
SERVICE_REASONS = frozenset({OVERCOMMIT_REASON, CONFLICT_REASON, NO_CANDIDATE_REASON})


def wake_table(chain: Chain) -> dict[str, frozenset[str]]:
    """Per kind of cluster change, the reason codes it can clear: the chain's plugins'
    declarations, plus the service's own reasons for every change that adds capacity."""
    table = {change.value: {r.value for r in reasons} for change, reasons in chain_wake_table(chain).items()}
    for change in MORE_CAPACITY:
        table[change.value] |= SERVICE_REASONS
    table[ClusterChange.SNAPSHOT.value] |= SERVICE_REASONS
    return {change: frozenset(reasons) for change, reasons in table.items()}


class ParkedEntry(BaseModel):
    """What a parked request waits for (stored in ``gpusched:parked``)."""

    model_config = ConfigDict(frozen=True)

    seq: int
    reasons: list[str]
    worker_selector: dict[str, str] | None = None
    #: The model's manual GPU selection (``<worker>:<type>:<index>``), for the gpu-selector filter.
    gpu_ids: list[str] | None = None
    cluster_id: int | None = None
    decided_version: int = 0
    parked_ms: int = 0
    #: Per GPU type, the allocatable share a GPU needs to be part of any candidate
    #: (the shares of :func:`scheduler_core.wake_floor`); None: no such floor is known.
    floor: dict[str, float] | None = None
    #: The allocatable bytes a GPU needs to be part of any candidate, whatever its type
    #: (the bytes of :func:`scheduler_core.wake_floor`, ``policy: precise``); None: not known.
    floor_bytes: int | None = None

    @classmethod
    def for_model(
        cls, model: ModelSpec, seq: int, reasons: Iterable[str], version: int, now_ms: int,
        floor: GpuFloor | None = None,
    ) -> ParkedEntry:
        """The entry of a request for ``model`` blocked by ``reasons``, waiting for a GPU
        that reaches ``floor`` (None: any GPU)."""
        shares = None if floor is None or floor.shares is None else dict(floor.shares)
        return cls(
            seq=seq,
            reasons=sorted(set(reasons)),
            worker_selector=dict(model.worker_selector) if model.worker_selector else None,
            gpu_ids=list(model.gpu_selector.gpu_ids or ()) or None if model.gpu_selector else None,
            cluster_id=model.cluster_id,
            decided_version=version,
            parked_ms=now_ms,
            floor=shares,
            floor_bytes=None if floor is None else floor.least_bytes,
        )

    @property
    def gpu_floor(self) -> GpuFloor:
        """The floor the strategies answered with when the request parked."""
        return GpuFloor(self.floor, self.floor_bytes)

    @property
    def bytes_floor(self) -> int | None:
        """:attr:`floor_bytes` when it rules anything out (a floor of 0 bytes does not)."""
        return self.floor_bytes if self.floor_bytes else None

    def filtered_model(self) -> ModelSpec:
        """The model as far as the worker filters read it."""
        selector = {"gpu_ids": self.gpu_ids} if self.gpu_ids else None
        return ModelSpec.model_validate(
            {"cluster_id": self.cluster_id, "worker_selector": self.worker_selector, "gpu_selector": selector}
        )


@dataclass(frozen=True, slots=True)
class Change:
    """One wake-relevant fact about a cluster change.

    Attributes:
        kind: a :class:`~scheduler_core.ClusterChange` value.
        workers: the workers concerned (empty for a snapshot: concerns everyone).
        version: the cluster version the change produced (0: not known). A request
            decided at that version or later already saw the change.
        shares: for ``capacity_freed``, each concerned GPU's allocatable share after
            the change, as ``(gpu type, allocatable / total)``; None: not known.
        frees: for ``capacity_freed``, each concerned GPU's allocatable bytes after the
            change (the order of ``shares``); None: not known.
    """

    kind: str
    workers: tuple[Worker, ...] = ()
    version: int = 0
    shares: tuple[tuple[str | None, float], ...] | None = None
    frees: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        ClusterChange(self.kind)  # a kind the plugins can declare (raises ValueError otherwise)


def blocking_reasons(
    result: ScheduleResult, filter_blocked_by: str | None, *, overcommit: bool = False
) -> list[str]:
    """Reason codes for a decision that placed nothing.

    Args:
        result: the core's result (``unschedulable``, or ``scheduled`` with an
            overcommitted pick the ledger will not book).
        filter_blocked_by: the code of the filter that left no worker, if any.
        overcommit: the selected candidate is overcommitted.
    """
    reasons: set[str] = set()
    if filter_blocked_by:
        reasons.add(filter_blocked_by)
    else:
        reasons.update(event.reason for event in result.events if event.reason)
    if overcommit:
        reasons.update({OVERCOMMIT_REASON, Reason.INSUFFICIENT_VRAM.value})
    if not reasons:
        reasons.add(NO_CANDIDATE_REASON)
    return sorted(reasons)


def woken_by(entry: ParkedEntry, change: Change, chain: Chain) -> bool:
    """Whether ``change`` could unblock the parked ``entry`` (under ``chain``'s plugins).

    Never for a request decided at or after the change's version (its decision
    saw the change); for freed capacity, only when a freed GPU reaches the
    entry's floor (:func:`fits_floor`).
    """
    if change.version and entry.decided_version >= change.version:
        return False
    if change.kind == ClusterChange.SNAPSHOT.value:
        return True
    if not fits_floor(entry, change):
        return False
    table = wake_table(chain)
    reasons = set(entry.reasons)
    known = frozenset().union(*table.values())
    if not (reasons & table.get(change.kind, frozenset()) or reasons - known):
        return False
    model = entry.filtered_model()
    return any(worker_admits(model, worker, chain) for worker in change.workers)


def fits_floor(entry: ParkedEntry, change: Change) -> bool:
    """Whether a GPU the change freed reaches the entry's floor (its bytes, or its type's share).

    True whenever it cannot be ruled out: no floor recorded, no shares known,
    or a freed GPU of a type the floor does not name.
    """
    if change.kind != ClusterChange.CAPACITY_FREED.value:
        return True
    return entry.gpu_floor.could_clear(change.shares, change.frees)


def budgeted(entry: ParkedEntry, changes: Sequence[Change]) -> bool:
    """Whether the number of such requests the freed GPUs of ``changes`` can take is bounded
    (see :func:`slots`) — the entry has a floor in bytes and every freed GPU's bytes are known,
    or every freed GPU is of a type its share floor names — and every change carries its
    version (so the requests left waiting are checked again)."""
    if (entry.floor is None and entry.bytes_floor is None) or not changes:
        return False
    for change in changes:
        # without its version the change could not be checked again later: wake, do not defer
        if change.kind != ClusterChange.CAPACITY_FREED.value or change.shares is None or not change.version:
            return False
        if entry.bytes_floor is not None:
            if change.frees is None:
                return False
        elif entry.floor is None or any(t is None or t not in entry.floor for t, _ in change.shares):
            return False
    return True


def slots(entries: Sequence[ParkedEntry], changes: Sequence[Change]) -> int:
    """How many of ``entries`` (each :func:`budgeted`) the freed GPUs could take at most.

    Every candidate that the freed capacity makes possible uses, on some freed GPU, at
    least the smallest floor among the entries: in bytes (precise), or its type's share of
    the GPU (gpustack claims its fraction of the total). A GPU with ``b`` bytes (share
    ``s``) takes at most ``b // smallest`` (``floor(s / smallest)``); with both kinds of
    floor, the smallest of the bytes and of the shares in bytes of that GPU's total (both
    kinds draw on the same free bytes). A bound to wake by, not a promise: the requests
    left waiting are checked again against the room that stays (:func:`wake_plan`).
    """
    in_bytes = [entry.bytes_floor for entry in entries if entry.bytes_floor is not None]
    in_shares = [entry.floor or {} for entry in entries if entry.bytes_floor is None]
    least_bytes = min(in_bytes, default=None)
    least_share: dict[str, float] = {}
    for floor in in_shares:
        for gpu_type, needed in floor.items():
            least_share[gpu_type] = min(needed, least_share.get(gpu_type, needed))
    total = 0
    for change in changes:
        frees: Sequence[int | None] = change.frees or [None] * len(change.shares or ())
        for (freed_type, share), free in zip(change.shares or (), frees, strict=True):
            total += _gpu_slots(least_bytes, least_share.get(freed_type or ""), share, free)
    return total


def _gpu_slots(least_bytes: int | None, least_share: float | None, share: float, free: int | None) -> int:
    """Requests one freed GPU (``share`` of its total, ``free`` bytes) holds at most."""
    if least_bytes is None or free is None:
        return int(share // least_share) if least_share else 0
    least = least_bytes
    if least_share and share > 0:
        least = min(least, math.ceil(least_share * free / share))  # the share floor in bytes
    return free // least if least > 0 else 0


@dataclass(frozen=True, slots=True)
class WakePlan:
    """Which parked requests to wake now, and whether more may be woken later.

    ``deferred``: requests the changes could unblock that wait because the freed
    GPUs' slots went to requests parked earlier; the caller checks them again once
    those have been decided (they may not use the slots).
    """

    targets: list[tuple[str, int]]
    deferred: int = 0


def wake_targets(
    parked: Mapping[str, str], changes: Sequence[Change], chain: Chain
) -> list[tuple[str, int]]:
    """(request id, parked seq) of every parked request any of ``changes`` could unblock.

    Args:
        parked: raw ``gpusched:parked`` entries by request id.
        changes: what happened.
        chain: the plugins the service decides with (their wake declarations and filters).

    Returns:
        Targets sorted by request id (deterministic wake order).
    """
    return [(rid, entry.seq) for rid, entry in _candidates(parked, changes, chain)]


def wake_plan(parked: Mapping[str, str], changes: Sequence[Change], chain: Chain) -> WakePlan:
    """The requests to wake for ``changes``: every one they could unblock, except that
    requests whose every freed GPU type has a floor are woken only up to the freed GPUs'
    :func:`slots`, oldest parked first; the rest are ``deferred``.

    Returns:
        Targets sorted by request id.
    """
    found = _candidates(parked, changes, chain)
    bounded = [(rid, entry) for rid, entry in found if budgeted(entry, changes)]
    if not bounded:
        return WakePlan([(rid, entry.seq) for rid, entry in found])
    # floors in bytes (precise) and share floors (gpustack) draw on the same freed bytes: one
    # budget for both, the oldest parked first
    room = slots([entry for _, entry in bounded], changes)
    oldest = sorted(bounded, key=lambda item: (item[1].parked_ms, item[0]))
    chosen = {rid for rid, _ in oldest[:room]}
    targets = [(rid, entry.seq) for rid, entry in found if rid in chosen or not budgeted(entry, changes)]
    return WakePlan(targets, max(len(bounded) - room, 0))


def _candidates(
    parked: Mapping[str, str], changes: Sequence[Change], chain: Chain
) -> list[tuple[str, ParkedEntry]]:
    found: list[tuple[str, ParkedEntry]] = []
    for request_id in sorted(parked):
        entry = ParkedEntry.model_validate_json(parked[request_id])
        if any(woken_by(entry, change, chain) for change in changes):
            found.append((request_id, entry))
    return found


def gpu_shares(worker: Worker, instances: Iterable[ModelInstance]) -> tuple[tuple[str | None, float], ...]:
    """Each GPU's allocatable share (allocatable / total) on ``worker`` under ``instances``'
    claims, by GPU type (:func:`gpu_room`)."""
    return tuple((gpu_type, share) for gpu_type, share, _ in gpu_room(worker, instances))


def gpu_room(
    worker: Worker, instances: Iterable[ModelInstance], only: Collection[str] | None = None
) -> tuple[tuple[str | None, float, int], ...]:
    """Each GPU's ``(type, allocatable share, allocatable bytes)`` on ``worker`` under
    ``instances``' claims: the ledger's capacity minus the claims the core counts
    (:func:`scheduler_core.gpu_capacity`, :func:`scheduler_core.instance_claims`).

    ``only``: the ledger keys (:func:`tasks.state.ledger.gpu_key`) of the GPUs to report
    (a change's freed GPUs); None: every GPU. A unified-memory worker (RAM caps GPU 0)
    reports every GPU at share 1 and its whole total: not ruled out.
    """
    status = worker.status or {}
    totals = {(gpu.type, gpu.index): gpu.total for gpu in worker.gpus}
    unified = bool((status.get("memory") or {}).get("is_unified_memory"))
    types = {worker.id: tuple(dict.fromkeys(t for t, _ in totals))}
    claimed: dict[tuple[int, str | None, int], int] = {}
    for instance in instances:
        for key, amount in instance_claims(instance, types).items():
            if key[0] == worker.id:
                claimed[key] = claimed.get(key, 0) + amount
    room: list[tuple[str | None, float, int]] = []
    for key, capacity in gpu_capacity(worker).items():
        total = totals.get((key[1], key[2]), 0)
        if total > 0 and (only is None or unified or gpu_key(*key) in only):
            free = total if unified else max(capacity - claimed.get(key, 0), 0)
            room.append((key[1], 1.0 if unified else free / total, free))
    return tuple(room)


def _capacity_grew(old: Mapping[str, int], new: Mapping[str, int]) -> bool:
    return any(amount > old.get(key, -1) for key, amount in new.items())


def worker_changes(old: Worker | None, new: Worker) -> list[Change]:
    """Wake-relevant facts of a worker update (``old`` None: the worker is new)."""
    if old is None:
        return [Change(ClusterChange.WORKER_ADDED, (new,))]
    changes: list[Change] = []
    if new.state == "ready" and old.state != "ready":
        changes.append(Change(ClusterChange.WORKER_READY, (new,)))
    if dict(new.labels) != dict(old.labels):
        changes.append(Change(ClusterChange.LABELS_CHANGED, (new,)))
    if new.cluster_id != old.cluster_id:
        changes.append(Change(ClusterChange.CLUSTER_CHANGED, (new,)))
    if new.name != old.name:
        changes.append(Change(ClusterChange.RENAMED, (new,)))
    if _capacity_grew(worker_capacity(old), worker_capacity(new)):
        changes.append(Change(ClusterChange.CAPACITY_INCREASED, (new,)))
    return changes


def snapshot_facts(stored: Mapping[str, str], workers: Sequence[Worker]) -> list[dict[str, Any]]:
    """The wake facts of a snapshot's workers against the rows stored (``[{kind, workers}]``).

    Per worker, :func:`worker_changes` of its stored row and its row in the snapshot (a
    row stored byte for byte the same is skipped unparsed), merged by kind, workers
    sorted. A worker the snapshot drops frees nothing and wakes nobody; capacity its
    instances free is the apply script's to add (it sees the ledger before and after).
    """
    by_kind: dict[str, set[int]] = {}
    for worker in workers:
        old_json = stored.get(str(worker.id))
        if old_json is not None and old_json == row_json(worker):
            continue
        old = Worker.model_validate_json(old_json) if old_json is not None else None
        for change in worker_changes(old, worker):
            by_kind.setdefault(change.kind, set()).add(worker.id)
    return [{"kind": kind, "workers": sorted(ids)} for kind, ids in sorted(by_kind.items())]


def describe(changes: Sequence[Change]) -> dict[str, Any]:
    """Event data naming what woke requests."""
    return {
        "by": [
            {"kind": change.kind, "workers": [worker.id for worker in change.workers]}
            for change in changes
        ]
    }


def parked_json(entry: ParkedEntry) -> str:
    """Compact JSON of a parked entry."""
    return json.dumps(entry.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
