"""The core's hooks for a service built on it: what a long-lived decider and its parking ask.

A service that parks unplaced requests and wakes them on cluster changes asks
the core, never a copy of its rules: which reasons a kind of change can clear
(:func:`chain_wake_table`), whether a changed worker could serve a parked
request (:func:`worker_admits`), which freed GPUs could place it at all
(:func:`wake_floor`); and it decides inside :func:`deciding`, which keeps the
cyclic garbage collector out of the decision (``schedule()`` itself changes no
interpreter state).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from scheduler_core._schemas import ModelSpec, ScheduleResult, Worker
from scheduler_core.cycle import CycleState
from scheduler_core.framework import Chain, passes_filters, wake_table
from scheduler_core.plugins import DEFAULT_CHAIN, POLICIES, chain_for
from scheduler_core.reasons import ClusterChange, Reason
from scheduler_core.wake import ANY_GPU, GpuFloor, WakeQuery
from scheduler_core.workers import worker_view


def chain_wake_table(chain: Chain = DEFAULT_CHAIN) -> dict[ClusterChange, frozenset[Reason]]:
    """Which reasons each kind of cluster change can clear, for ``chain``'s plugins
    (see :func:`scheduler_core.framework.wake_table`)."""
    return wake_table(chain.filters, chain.strategies)


def worker_admits(model: ModelSpec, worker: Worker, chain: Chain = DEFAULT_CHAIN) -> bool:
    """Whether ``worker`` alone passes ``chain``'s filters for ``model``."""
    return passes_filters(model, worker_view(worker), chain.filters)


def wake_floor(
    model: ModelSpec, result: ScheduleResult, chain: Chain, workers: Sequence[Worker],
    state: CycleState | None = None,
) -> GpuFloor:
    """The least a freed GPU must offer to place the parked decision's model: the union of
    the answers of the strategies that decided it (:meth:`Chain.wake_floor`).

    Args:
        model: the request's model.
        result: the decision that parked it (its policy picks the strategies asked).
        chain: the configured chain (it lends its settings; see
            :func:`scheduler_core.plugins.chain_for`).
        workers: the cluster the decision saw.
        state: the facts the decision prepared (:attr:`scheduler_core.decision.Decided.state`):
            with them a strategy answers with its own rule's bound (tighter); None: from the
            estimate alone.

    Returns:
        :data:`~scheduler_core.wake.ANY_GPU` for a rejected or filter-blocked result (no
        estimate) or a policy no longer registered; else the union of the floors.
    """
    estimate = result.estimate
    if estimate is None or result.status == "rejected" or result.policy not in POLICIES:
        return ANY_GPU
    decided = chain_for(result.policy, chain)
    return decided.wake_floor(WakeQuery(model, estimate, decided.settings, workers, state))


@contextmanager
def deciding() -> Iterator[None]:
    """Run decisions with the cyclic garbage collector paused (restored on exit, nestable).

    A decision allocates many short-lived objects and builds no reference cycle it
    needs collected; on a 2,000-worker cluster the collector's passes over them cost
    more than the decision's own work. Reference counting still frees everything.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
