"""Parking reasons and wake rules (the service's ``EventsToRegister``).

A request that fits nowhere is parked with the reason codes that blocked it:
the blocking filter's code (``worker_not_ready``, ``label_mismatch``,
``gpu_selector_mismatch``, ``cluster_mismatch``) or the strategies' codes
(``insufficient_vram``, ``tp_not_divisible``, ``no_worker_combination``,
``heterogeneous_gpus``), plus the service's own ``overcommit``,
``conflict_retries_exhausted`` and ``no_candidate``. Each kind of cluster
change declares the reasons it can clear (:data:`WAKES`), and a parked
request is woken only if one of its reasons is among them *and* the changed
worker could serve it (:func:`worker_serves`). Unknown reason codes are woken
by every change: a request may be woken in vain, never forgotten.

This module holds the service's copies of three core rules, each in one
place so that switching it to a core API is a one-place edit: the core's
reason codes (:data:`FILTER_REASONS`, :data:`STRATEGY_CAPACITY_REASONS`,
:data:`STATIC_REASONS`), the worker filters' predicates
(:func:`worker_serves`) and the parsing of manual GPU ids
(:func:`pinned_worker_names`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from scheduler_core import ModelSpec, ScheduleResult, Worker
from tasks.state.ledger import worker_capacity

#: The core's worker-filter reason codes a cluster change can clear.
FILTER_REASONS = frozenset(
    {"cluster_mismatch", "gpu_selector_mismatch", "label_mismatch", "worker_not_ready"}
)
#: The core's strategy reason codes that more capacity can clear.
STRATEGY_CAPACITY_REASONS = frozenset({"insufficient_vram", "no_worker_combination", "tp_not_divisible"})
#: The service's reason for an overcommitted pick the ledger will not book.
OVERCOMMIT_REASON = "overcommit"
#: The service's reason for a request whose reservation attempts all conflicted.
CONFLICT_REASON = "conflict_retries_exhausted"
#: The service's reason when a result names no blocking code at all.
NO_CANDIDATE_REASON = "no_candidate"
#: Reasons cleared by more capacity (strategy codes, plus the service's own).
CAPACITY_REASONS = STRATEGY_CAPACITY_REASONS | {OVERCOMMIT_REASON, CONFLICT_REASON, NO_CANDIDATE_REASON}
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


def pinned_worker_names(model: ModelSpec) -> list[str] | None:
    """Worker names of a manual GPU selection (``<worker>:<type>:<index>`` ids), sorted; None if none.

    The service's copy of the core's GPU-id parsing (the ``gpu_selector`` filter).
    """
    selector = model.gpu_selector
    if not (selector and selector.gpu_ids):
        return None
    return sorted({gpu_id.rsplit(":", 2)[0] for gpu_id in selector.gpu_ids})


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
        return cls(
            seq=seq,
            reasons=sorted(set(reasons)),
            worker_selector=dict(model.worker_selector) if model.worker_selector else None,
            pinned_workers=pinned_worker_names(model),
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
        reasons.update({OVERCOMMIT_REASON, "insufficient_vram"})
    if not reasons:
        reasons.add(NO_CANDIDATE_REASON)
    return sorted(reasons)


def worker_serves(entry: ParkedEntry, worker: Worker) -> bool:
    """Whether ``worker`` could serve the parked request: ready, same cluster, pinned, labels match.

    The service's copy of the core's worker filters (``status``, ``cluster``,
    ``gpu_selector``, ``labels``).
    """
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
    return any(worker_serves(entry, worker) for worker in change.workers)


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
