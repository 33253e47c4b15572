"""The plugins a chain can name, GPUStack's default chain, and the wake rules it implies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler_core._schemas import ModelSpec, Worker
from scheduler_core.filters import ClusterFilter, GpuSelectorFilter, LabelFilter, StatusFilter
from scheduler_core.framework import Chain, Strategy, WorkerFilter, passes_filters, wake_table
from scheduler_core.reasons import ClusterChange, Reason
from scheduler_core.strategies import (
    ManualGpuSelection,
    MultiWorkerMultiGpu,
    SingleWorkerMultiGpu,
    SingleWorkerSingleGpu,
)
from scheduler_core.workers import worker_view

#: GPUStack's worker filters, in its order (``scheduler/scheduler.py: find_candidate``).
DEFAULT_FILTERS: tuple[WorkerFilter, ...] = (
    ClusterFilter(),
    GpuSelectorFilter(),
    LabelFilter(),
    StatusFilter(),
)

#: GPUStack's order: manual → 1 GPU → 1 worker with N GPUs → N workers.
DEFAULT_STRATEGIES: tuple[Strategy, ...] = (
    ManualGpuSelection(),
    SingleWorkerSingleGpu(),
    SingleWorkerMultiGpu(),
    MultiWorkerMultiGpu(),
)

#: Plugins by name, for deployments that compose their own chain.
FILTERS_BY_NAME: Mapping[str, WorkerFilter] = {f.name: f for f in DEFAULT_FILTERS}
STRATEGIES_BY_NAME: Mapping[str, Strategy] = {s.name: s for s in DEFAULT_STRATEGIES}

#: GPUStack's chain.
DEFAULT_CHAIN = Chain(filters=DEFAULT_FILTERS, strategies=DEFAULT_STRATEGIES)


def chain_of(
    filters: Sequence[str], strategies: Sequence[str], max_candidates: int | None = None
) -> Chain:
    """A chain of the named plugins, in the given order.

    Raises:
        KeyError: a name is not a known plugin.
    """
    return Chain(
        filters=tuple(FILTERS_BY_NAME[name] for name in filters),
        strategies=tuple(STRATEGIES_BY_NAME[name] for name in strategies),
        max_candidates=max_candidates,
    )


def chain_wake_table(chain: Chain = DEFAULT_CHAIN) -> dict[ClusterChange, frozenset[Reason]]:
    """Which reasons each kind of cluster change can clear, for ``chain``'s plugins
    (see :func:`scheduler_core.framework.wake_table`)."""
    return wake_table(chain.filters, chain.strategies)


def worker_admits(model: ModelSpec, worker: Worker, chain: Chain = DEFAULT_CHAIN) -> bool:
    """Whether ``worker`` alone passes ``chain``'s filters for ``model``."""
    return passes_filters(model, worker_view(worker), chain.filters)
