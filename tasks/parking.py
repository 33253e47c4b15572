"""Parking reasons and wake rules (the service's ``EventsToRegister``).

A request that fits nowhere is parked with the reason codes that blocked it:
the blocking filter's code (``worker_not_ready``, ``label_mismatch``,
``gpu_selector_mismatch``, ``cluster_mismatch``) or the strategies' codes
(``insufficient_vram``, ``tp_not_divisible``, ``no_worker_combination``,
``heterogeneous_gpus``, ``overcommit``), plus the service's own
``conflict_retries_exhausted``. Each kind of cluster change declares the
reasons it can clear (:data:`WAKES`), and a parked request is woken only if
one of its reasons is among them *and* the changed worker could serve it
(same cluster, labels match its worker selector, named in its pinned GPU ids,
ready). Unknown reason codes are woken by every change: a request may be
woken in vain, never forgotten.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from scheduler_core import ModelSpec, ScheduleResult, Worker
from tasks.ledger import worker_capacity

#: Filter codes (scheduler_core.filters) a cluster change can clear.
FILTER_REASONS = frozenset(
    {"cluster_mismatch", "gpu_selector_mismatch", "label_mismatch", "worker_not_ready"}
)
#: Reasons cleared by more capacity (strategy codes, plus the service's own).
CAPACITY_REASONS = frozenset(
    {
        "insufficient_vram",
        "no_worker_combination",
        "tp_not_divisible",
        "overcommit",
        "conflict_retries_exhausted",
        "no_candidate",
    }
)
#: Reasons only a new snapshot can clear (the request itself is contradictory).
STATIC_REASONS = frozenset({"heterogeneous_gpus"})
KNOWN_REASONS = FILTER_REASONS | CAPACITY_REASONS | STATIC_REASONS

#: Cluster change kinds and the reasons each can clear.
WAKES: dict[str, frozenset[str]] = {
    "snapshot": KNOWN_REASONS,
    "worker_added": CAPACITY_REASONS | FILTER_REASONS,
    "worker_ready": CAPACITY_REASONS | {"worker_not_ready"},
    "labels_changed": CAPACITY_REASONS | {"label_mismatch"},
    "cluster_changed": CAPACITY_REASONS | {"cluster_mismatch"},
    "renamed": CAPACITY_REASONS | {"gpu_selector_mismatch"},
    "capacity_increased": CAPACITY_REASONS,
    "capacity_freed": CAPACITY_REASONS,
}


class ParkedEntry(BaseModel):
    """What a parked request waits for (stored in ``gpusched:parked``)."""

    model_config = ConfigDict(frozen=True)

    seq: int
    reasons: list[str]
    worker_selector: dict[str, str] | None = None
    pinned_workers: list[str] | None = None
    cluster_id: int | None = None
    decided_version: int = 0
    parked_ms: int = 0

    @classmethod
    def for_model(
        cls, model: ModelSpec, seq: int, reasons: Iterable[str], version: int, now_ms: int
    ) -> ParkedEntry:
        """The entry of a request for ``model`` blocked by ``reasons``."""
        selector = model.gpu_selector
        pinned = (
            sorted({gpu_id.rsplit(":", 2)[0] for gpu_id in selector.gpu_ids})
            if selector and selector.gpu_ids
            else None
        )
        return cls(
            seq=seq,
            reasons=sorted(set(reasons)),
            worker_selector=dict(model.worker_selector) if model.worker_selector else None,
            pinned_workers=pinned,
            cluster_id=model.cluster_id,
            decided_version=version,
            parked_ms=now_ms,
        )


@dataclass(frozen=True, slots=True)
class Change:
    """One wake-relevant fact about a cluster change.

    Attributes:
        kind: a key of :data:`WAKES`.
        workers: the workers concerned (empty for a snapshot: concerns everyone).
    """

    kind: str
    workers: tuple[Worker, ...] = ()


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
        reasons.update({"overcommit", "insufficient_vram"})
    if not reasons:
        reasons.add("no_candidate")
    return sorted(reasons)


def _worker_serves(entry: ParkedEntry, worker: Worker) -> bool:
    if worker.state != "ready":
        return False
    if entry.cluster_id is not None and worker.cluster_id != entry.cluster_id:
        return False
    if entry.pinned_workers is not None and worker.name not in entry.pinned_workers:
        return False
    selector = entry.worker_selector or {}
    return all(worker.labels.get(key) == value for key, value in selector.items())


def woken_by(entry: ParkedEntry, change: Change) -> bool:
    """Whether ``change`` could unblock the parked ``entry``."""
    if change.kind == "snapshot":
        return True
    reasons = set(entry.reasons)
    clears = WAKES.get(change.kind, frozenset())
    if not (reasons & clears or reasons - KNOWN_REASONS):
        return False
    return any(_worker_serves(entry, worker) for worker in change.workers)


def wake_targets(
    parked: Mapping[str, str], changes: Sequence[Change]
) -> list[tuple[str, int]]:
    """(request id, parked seq) of the parked requests any of ``changes`` could unblock.

    Args:
        parked: raw ``gpusched:parked`` entries by request id.
        changes: what happened.

    Returns:
        Targets sorted by request id (deterministic wake order).
    """
    targets: list[tuple[str, int]] = []
    for request_id in sorted(parked):
        entry = ParkedEntry.model_validate_json(parked[request_id])
        if any(woken_by(entry, change) for change in changes):
            targets.append((request_id, entry.seq))
    return targets


def _capacity_grew(old: Mapping[str, int], new: Mapping[str, int]) -> bool:
    return any(amount > old.get(key, -1) for key, amount in new.items())


def worker_changes(old: Worker | None, new: Worker) -> list[Change]:
    """Wake-relevant facts of a worker update (``old`` None: the worker is new)."""
    if old is None:
        return [Change("worker_added", (new,))]
    changes: list[Change] = []
    if new.state == "ready" and old.state != "ready":
        changes.append(Change("worker_ready", (new,)))
    if dict(new.labels) != dict(old.labels):
        changes.append(Change("labels_changed", (new,)))
    if new.cluster_id != old.cluster_id:
        changes.append(Change("cluster_changed", (new,)))
    if new.name != old.name:
        changes.append(Change("renamed", (new,)))
    if _capacity_grew(worker_capacity(old), worker_capacity(new)):
        changes.append(Change("capacity_increased", (new,)))
    return changes


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
