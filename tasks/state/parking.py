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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from scheduler_core import (
    MORE_CAPACITY,
    Chain,
    ClusterChange,
    ModelSpec,
    Reason,
    ScheduleResult,
    Worker,
    chain_wake_table,
    worker_admits,
)
from tasks.state.ledger import worker_capacity

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

    @classmethod
    def for_model(
        cls, model: ModelSpec, seq: int, reasons: Iterable[str], version: int, now_ms: int
    ) -> ParkedEntry:
        """The entry of a request for ``model`` blocked by ``reasons``."""
        return cls(
            seq=seq,
            reasons=sorted(set(reasons)),
            worker_selector=dict(model.worker_selector) if model.worker_selector else None,
            gpu_ids=list(model.gpu_selector.gpu_ids or ()) or None if model.gpu_selector else None,
            cluster_id=model.cluster_id,
            decided_version=version,
            parked_ms=now_ms,
        )

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
    """

    kind: str
    workers: tuple[Worker, ...] = ()

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
    """Whether ``change`` could unblock the parked ``entry`` (under ``chain``'s plugins)."""
    if change.kind == ClusterChange.SNAPSHOT.value:
        return True
    table = wake_table(chain)
    reasons = set(entry.reasons)
    known = frozenset().union(*table.values())
    if not (reasons & table.get(change.kind, frozenset()) or reasons - known):
        return False
    model = entry.filtered_model()
    return any(worker_admits(model, worker, chain) for worker in change.workers)


def wake_targets(
    parked: Mapping[str, str], changes: Sequence[Change], chain: Chain
) -> list[tuple[str, int]]:
    """(request id, parked seq) of the parked requests any of ``changes`` could unblock.

    Args:
        parked: raw ``gpusched:parked`` entries by request id.
        changes: what happened.
        chain: the plugins the service decides with (their wake declarations and filters).

    Returns:
        Targets sorted by request id (deterministic wake order).
    """
    targets: list[tuple[str, int]] = []
    for request_id in sorted(parked):
        entry = ParkedEntry.model_validate_json(parked[request_id])
        if any(woken_by(entry, change, chain) for change in changes):
            targets.append((request_id, entry.seq))
    return targets


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
