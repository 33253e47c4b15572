"""Worker filters (GPUStack ``policies/worker_filters``), applied in order.

Each filter keeps the workers that pass and says what it did in GPUStack's
words. The chain stops at the first filter that leaves no worker. GPUStack's
backend-framework and local-path filters need runner catalogues and worker
probes the request does not carry; they are not part of this chain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from scheduler_core._schemas import ModelSpec
from scheduler_core.cluster import WorkerView


@dataclass(frozen=True, slots=True)
class FilterOutcome:
    """Workers that passed, the user-facing messages, and a reason code for the rest."""

    workers: tuple[WorkerView, ...]
    messages: tuple[str, ...] = ()
    reason: str | None = None


class WorkerFilter(Protocol):
    """One filter of the chain."""

    name: str

    def __call__(self, model: ModelSpec, workers: Sequence[WorkerView]) -> FilterOutcome:
        """Filter ``workers`` for ``model``."""
        ...


def _plural(count: int) -> str:
    return "worker" if count == 1 else "workers"


class ClusterFilter:
    """Keep workers of the model's cluster (``worker_filters/cluster_filter.py``).

    Always runs: a model without a cluster matches only workers without one.
    """

    name = "cluster"

    def __call__(self, model: ModelSpec, workers: Sequence[WorkerView]) -> FilterOutcome:
        """Match ``worker.cluster_id == model.cluster_id`` (None equals None only)."""
        kept = tuple(w for w in workers if w.cluster_id == model.cluster_id)
        message = f"Matched {len(kept)} {_plural(len(kept))} by cluster selector."
        return FilterOutcome(kept, (message,), "cluster_mismatch")


class GpuSelectorFilter:
    """Keep the workers named in manual ``gpu_ids`` (``worker_filters/gpu_matching_filter.py``)."""

    name = "gpu_selector"

    def __call__(self, model: ModelSpec, workers: Sequence[WorkerView]) -> FilterOutcome:
        """Match worker names against ``<worker>:<type>:<index>`` ids.

        Missing workers are listed in selection order (GPUStack lists a set, whose
        order changes from process to process).
        """
        selector = model.gpu_selector
        if selector is None or not selector.gpu_ids:
            return FilterOutcome(tuple(workers))
        wanted = list(dict.fromkeys(gpu_id.rsplit(":", 2)[0] for gpu_id in selector.gpu_ids))
        kept = tuple(w for w in workers if w.name in wanted)
        message = f"Matched {len(kept)} {_plural(len(kept))} by gpu selector."
        present = {w.name for w in kept}
        missing = [name for name in wanted if name not in present]
        if missing:
            message += f" Missing workers: {', '.join(missing)}."
        return FilterOutcome(kept, (message,), "gpu_selector_mismatch")


class LabelFilter:
    """Keep workers whose labels contain every ``worker_selector`` pair
    (``worker_filters/label_matching_filter.py``); says so only when it removed one."""

    name = "labels"

    def __call__(self, model: ModelSpec, workers: Sequence[WorkerView]) -> FilterOutcome:
        """Exact label matching."""
        selector = model.worker_selector
        if selector is None:
            return FilterOutcome(tuple(workers))
        kept = tuple(w for w in workers if all(w.labels.get(k) == v for k, v in selector.items()))
        if len(kept) == len(workers):
            return FilterOutcome(kept)
        message = f"Matched {len(kept)}/{len(workers)} workers by label selector: {selector}."
        return FilterOutcome(kept, (message,), "label_mismatch")


class StatusFilter:
    """Keep READY workers (``worker_filters/status_filter.py``); says so only when it removed one."""

    name = "status"

    def __call__(self, model: ModelSpec, workers: Sequence[WorkerView]) -> FilterOutcome:
        """Only ``state == ready`` is schedulable."""
        kept = tuple(w for w in workers if w.state == "ready")
        if len(kept) == len(workers):
            return FilterOutcome(kept)
        message = f"Matched {len(kept)}/{len(workers)} workers by READY status."
        return FilterOutcome(kept, (message,), "worker_not_ready")


#: The default chain, in GPUStack's order.
DEFAULT_FILTERS: tuple[WorkerFilter, ...] = (
    ClusterFilter(),
    GpuSelectorFilter(),
    LabelFilter(),
    StatusFilter(),
)


@dataclass(frozen=True, slots=True)
class FilterChainOutcome:
    """Surviving workers, all filter messages in order, and the blocking reason if any."""

    workers: tuple[WorkerView, ...]
    messages: tuple[str, ...]
    blocked_by: str | None


def run_filters(
    model: ModelSpec,
    workers: Sequence[WorkerView],
    filters: Sequence[WorkerFilter] = DEFAULT_FILTERS,
) -> FilterChainOutcome:
    """Apply ``filters`` in order, stopping at the first that leaves no worker."""
    current = tuple(workers)
    messages: list[str] = []
    for worker_filter in filters:
        outcome = worker_filter(model, current)
        messages.extend(outcome.messages)
        current = outcome.workers
        if not current:
            return FilterChainOutcome(current, tuple(messages), outcome.reason)
    return FilterChainOutcome(current, tuple(messages), None)
