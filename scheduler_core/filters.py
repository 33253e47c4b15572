"""Worker filters (GPUStack ``policies/worker_filters``), applied in order.

Each filter keeps the workers that pass and says what it did in GPUStack's
words. The chain stops at the first filter that leaves no worker. GPUStack's
backend-framework and local-path filters need runner catalogues and worker
probes the request does not carry; they are not part of this chain.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import ClassVar

from scheduler_core._schemas import ModelSpec
from scheduler_core.framework import Clears, FilterOutcome
from scheduler_core.gpu_ids import selected_worker_names
from scheduler_core.reasons import ClusterChange, Reason
from scheduler_core.workers import WorkerView


def _plural(count: int) -> str:
    return "worker" if count == 1 else "workers"


class ClusterFilter:
    """Keep workers of the model's cluster (``worker_filters/cluster_filter.py``).

    Always runs: a model without a cluster matches only workers without one.
    """

    name = "cluster"
    clears: ClassVar[Clears] = {
        Reason.CLUSTER_MISMATCH: frozenset({ClusterChange.WORKER_ADDED, ClusterChange.CLUSTER_CHANGED})
    }

    def model_key(self, model: ModelSpec) -> Hashable:
        """What the filter reads of the model: its outcome is a function of this and the workers."""
        return model.cluster_id

    def __call__(self, model: ModelSpec, workers: Sequence[WorkerView]) -> FilterOutcome:
        """Match ``worker.cluster_id == model.cluster_id`` (None equals None only)."""
        kept = tuple(w for w in workers if w.cluster_id == model.cluster_id)
        message = f"Matched {len(kept)} {_plural(len(kept))} by cluster selector."
        return FilterOutcome(kept, (message,), Reason.CLUSTER_MISMATCH)


class GpuSelectorFilter:
    """Keep the workers named in manual ``gpu_ids`` (``worker_filters/gpu_matching_filter.py``)."""

    name = "gpu_selector"
    clears: ClassVar[Clears] = {
        Reason.GPU_SELECTOR_MISMATCH: frozenset({ClusterChange.WORKER_ADDED, ClusterChange.RENAMED})
    }

    def model_key(self, model: ModelSpec) -> Hashable:
        """What the filter reads of the model: its outcome is a function of this and the workers."""
        selector = model.gpu_selector
        return tuple(selector.gpu_ids) if selector is not None and selector.gpu_ids else None

    def __call__(self, model: ModelSpec, workers: Sequence[WorkerView]) -> FilterOutcome:
        """Match worker names against ``<worker>:<type>:<index>`` ids.

        Missing workers are listed in selection order (GPUStack lists a set, whose
        order changes from process to process).
        """
        selector = model.gpu_selector
        if selector is None or not selector.gpu_ids:
            return FilterOutcome(tuple(workers))
        wanted = selected_worker_names(selector.gpu_ids)
        kept = tuple(w for w in workers if w.name in wanted)
        message = f"Matched {len(kept)} {_plural(len(kept))} by gpu selector."
        present = {w.name for w in kept}
        missing = [name for name in wanted if name not in present]
        if missing:
            message += f" Missing workers: {', '.join(missing)}."
        return FilterOutcome(kept, (message,), Reason.GPU_SELECTOR_MISMATCH)


class LabelFilter:
    """Keep workers whose labels contain every ``worker_selector`` pair
    (``worker_filters/label_matching_filter.py``); says so only when it removed one."""

    name = "labels"
    clears: ClassVar[Clears] = {
        Reason.LABEL_MISMATCH: frozenset({ClusterChange.WORKER_ADDED, ClusterChange.LABELS_CHANGED})
    }

    def model_key(self, model: ModelSpec) -> Hashable:
        """What the filter reads of the model: its outcome is a function of this and the workers."""
        selector = model.worker_selector
        return None if selector is None else tuple(selector.items())  # in order: the message shows it

    def __call__(self, model: ModelSpec, workers: Sequence[WorkerView]) -> FilterOutcome:
        """Exact label matching."""
        selector = model.worker_selector
        if selector is None:
            return FilterOutcome(tuple(workers))
        kept = tuple(w for w in workers if all(w.labels.get(k) == v for k, v in selector.items()))
        if len(kept) == len(workers):
            return FilterOutcome(kept)
        message = f"Matched {len(kept)}/{len(workers)} workers by label selector: {selector}."
        return FilterOutcome(kept, (message,), Reason.LABEL_MISMATCH)


class StatusFilter:
    """Keep READY workers (``worker_filters/status_filter.py``); says so only when it removed one."""

    name = "status"
    clears: ClassVar[Clears] = {
        Reason.WORKER_NOT_READY: frozenset({ClusterChange.WORKER_ADDED, ClusterChange.WORKER_READY})
    }

    def model_key(self, model: ModelSpec) -> Hashable:
        """What the filter reads of the model: nothing."""
        return None

    def __call__(self, model: ModelSpec, workers: Sequence[WorkerView]) -> FilterOutcome:
        """Only ``state == ready`` is schedulable."""
        kept = tuple(w for w in workers if w.state == "ready")
        if len(kept) == len(workers):
            return FilterOutcome(kept)
        message = f"Matched {len(kept)}/{len(workers)} workers by READY status."
        return FilterOutcome(kept, (message,), Reason.WORKER_NOT_READY)
