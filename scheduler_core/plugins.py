"""The plugins a chain can name, GPUStack's default chain, and the wake rules it implies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler_core._schemas import ModelSpec, ScheduleResult, Worker
from scheduler_core.filters import ClusterFilter, GpuSelectorFilter, LabelFilter, StatusFilter
from scheduler_core.framework import (
    GPUSTACK,
    PRECISE,
    Chain,
    Scorer,
    Strategy,
    WorkerFilter,
    passes_filters,
    wake_table,
)
from scheduler_core.precise.multi_worker import PreciseMultiWorker
from scheduler_core.precise.scoring import PreciseScorer
from scheduler_core.precise.settings import PreciseSettings
from scheduler_core.precise.single_worker import PreciseSingleWorker
from scheduler_core.precise.wake import least_gpu_bytes
from scheduler_core.reasons import ClusterChange, Reason
from scheduler_core.scoring import GpustackScorer
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

#: ``policy: precise``: GPUStack's manual stage (the user chose the GPUs), then one worker
#: with sliding-window GPU sets, then several partly used workers.
PRECISE_STRATEGIES: tuple[Strategy, ...] = (
    DEFAULT_STRATEGIES[0],
    PreciseSingleWorker(),
    PreciseMultiWorker(),
)

GPUSTACK_SCORER: Scorer = GpustackScorer()
PRECISE_SCORER: Scorer = PreciseScorer()

#: Plugins by name, for deployments that compose their own chain.
FILTERS_BY_NAME: Mapping[str, WorkerFilter] = {f.name: f for f in DEFAULT_FILTERS}
STRATEGIES_BY_NAME: Mapping[str, Strategy] = {s.name: s for s in DEFAULT_STRATEGIES + PRECISE_STRATEGIES}
SCORERS_BY_NAME: Mapping[str, Scorer] = {s.name: s for s in (GPUSTACK_SCORER, PRECISE_SCORER)}
#: The scorer a chain without one uses, by its policy.
SCORERS_BY_POLICY: Mapping[str, Scorer] = {GPUSTACK: GPUSTACK_SCORER, PRECISE: PRECISE_SCORER}

#: GPUStack's chain.
DEFAULT_CHAIN = Chain(filters=DEFAULT_FILTERS, strategies=DEFAULT_STRATEGIES)
#: The precise chain (without GPU sharing unless a request asks for it).
PRECISE_CHAIN = Chain(filters=DEFAULT_FILTERS, strategies=PRECISE_STRATEGIES, scorer=PRECISE_SCORER)
#: Each policy's own chain.
CHAINS_BY_POLICY: Mapping[str, Chain] = {GPUSTACK: DEFAULT_CHAIN, PRECISE: PRECISE_CHAIN}


def chain_for(policy: str, configured: Chain | None = None) -> Chain:
    """The chain a request of ``policy`` runs.

    The configured chain when it implements that policy; otherwise the policy's own
    strategies and scorer with the configured filters, candidate cap and settings
    (a service configured for one policy still decides requests of the other).
    """
    if configured is None:
        return CHAINS_BY_POLICY[policy]
    if configured.policy == policy:
        return configured
    own = CHAINS_BY_POLICY[policy]
    return Chain(
        configured.filters, own.strategies, configured.max_candidates, own.scorer, configured.settings
    )


def scorer_of(chain: Chain) -> Scorer:
    """The chain's scorer, or its policy's."""
    return chain.scorer or SCORERS_BY_POLICY[chain.policy]


def chain_of(
    filters: Sequence[str],
    strategies: Sequence[str],
    max_candidates: int | None = None,
    scorer: str | None = None,
    settings: PreciseSettings | None = None,
) -> Chain:
    """A chain of the named plugins, in the given order (scorer None: the policy's).

    Raises:
        KeyError: a name is not a known plugin.
    """
    return Chain(
        filters=tuple(FILTERS_BY_NAME[name] for name in filters),
        strategies=tuple(STRATEGIES_BY_NAME[name] for name in strategies),
        max_candidates=max_candidates,
        scorer=None if scorer is None else SCORERS_BY_NAME[scorer],
        settings=settings or PreciseSettings(),
    )


def chain_wake_table(chain: Chain = DEFAULT_CHAIN) -> dict[ClusterChange, frozenset[Reason]]:
    """Which reasons each kind of cluster change can clear, for ``chain``'s plugins
    (see :func:`scheduler_core.framework.wake_table`)."""
    return wake_table(chain.filters, chain.strategies)


def worker_admits(model: ModelSpec, worker: Worker, chain: Chain = DEFAULT_CHAIN) -> bool:
    """Whether ``worker`` alone passes ``chain``'s filters for ``model``."""
    return passes_filters(model, worker_view(worker), chain.filters)


def free_share_floor(model: ModelSpec, result: ScheduleResult) -> dict[str, float] | None:
    """Per GPU type, the allocatable share (allocatable / total) below which a GPU can be
    part of no candidate of this decision's model; None when the rules give no such floor.

    Under ``policy: gpustack`` every automatic strategy (single GPU, one worker's GPUs,
    several workers) leaves out a GPU whose allocatable share is below the fraction of its
    type (``sglang_resource_fit_selector.py``: the ``allocatable / total < mem_fraction_static``
    checks), and the fraction of a type depends on the workers' GPUs only, never on what
    instances hold. So freeing claims can unblock the model only on a GPU that reaches its
    type's floor afterwards. Types missing from the floor (none computed: a diffusion
    model, GPUs of a type the cluster did not have) have no floor; callers treat them as
    "could fit".

    None for a rejected or filter-blocked result (no estimate), a manual GPU selection
    (its stage overcommits instead of skipping), and ``policy: precise`` (its own fit).
    """
    estimate = result.estimate
    if result.policy != GPUSTACK or estimate is None or result.status == "rejected":
        return None
    if model.gpu_selector is not None and model.gpu_selector.gpu_ids:
        return None
    return {gpu_type: fraction for gpu_type, fraction in estimate.mem_fraction_static.items() if fraction > 0}


def free_bytes_floor(
    model: ModelSpec, result: ScheduleResult, chain: Chain, workers: Sequence[Worker]
) -> int | None:
    """The allocatable bytes below which a GPU can be part of no candidate of this decision's
    model, for policies whose rules give one; None otherwise (callers treat it as "could fit").

    ``policy: precise``: :func:`scheduler_core.precise.wake.least_gpu_bytes` with the
    chain's precise settings, the workers the decision saw bounding an automatic tp/pp.
    ``policy: gpustack`` speaks in shares instead (:func:`free_share_floor`).
    """
    if result.policy == PRECISE:
        return least_gpu_bytes(model, result, chain.settings, workers)
    return None
