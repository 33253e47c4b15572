"""The plugin seams of a decision: worker filters and placement strategies.

Like kube-scheduler's framework, each plugin is a small unit behind a typed
protocol that reports *why* it rejected something with a :class:`Reason`, and
declares which :class:`ClusterChange` kinds can clear each of its reasons
(``clears``, kube's ``EventsToRegister``). :func:`wake_table` derives, from a
chain's plugins, which reasons each kind of change can clear: the table a
service parks unplaced requests by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from scheduler_core._schemas import ModelSpec
from scheduler_core.candidates import Candidate
from scheduler_core.events import Action, Event, Level
from scheduler_core.messages import default_message
from scheduler_core.precise.settings import PreciseSettings
from scheduler_core.reasons import ClusterChange, Reason
from scheduler_core.selection import Selection
from scheduler_core.workers import WorkerView

#: What a plugin declares: each of its reasons and the changes that can clear it.
Clears = Mapping[Reason, frozenset[ClusterChange]]


@dataclass(frozen=True, slots=True)
class FilterOutcome:
    """Workers that passed, the user-facing messages, and the reason for the others."""

    workers: tuple[WorkerView, ...]
    messages: tuple[str, ...] = ()
    reason: Reason | None = None


class WorkerFilter(Protocol):
    """One worker filter of the chain (GPUStack ``policies/worker_filters``)."""

    name: str

    @property
    def clears(self) -> Clears:
        """Each reason this filter reports and the changes that can clear it."""
        ...

    def __call__(self, model: ModelSpec, workers: Sequence[WorkerView]) -> FilterOutcome:
        """Filter ``workers`` for ``model``."""
        ...


class Strategy(Protocol):
    """One placement strategy: a stage of GPUStack's selector chain."""

    name: str

    @property
    def clears(self) -> Clears:
        """Each reason this strategy reports and the changes that can clear it."""
        ...

    def skip(self, selection: Selection) -> bool:
        """True when GPUStack's ``should_skip_candidate_func`` skips this stage."""
        ...

    def __call__(self, selection: Selection) -> list[Candidate]:
        """Candidates on the selection's filtered workers."""
        ...


class Scorer(Protocol):
    """Scores the candidates and picks one (GPUStack ``policies/scorers`` and the pick)."""

    name: str

    def score(self, candidates: Sequence[Candidate], selection: Selection) -> list[float]:
        """One score per candidate, in candidate order."""
        ...

    def pick(self, candidates: Sequence[Candidate], scores: Sequence[float]) -> int | None:
        """Index of the chosen candidate (None when there is none)."""
        ...


#: The precise knobs of a chain that sets none.
_DEFAULT_SETTINGS = PreciseSettings()

#: The policies a chain can implement.
GPUSTACK, PRECISE = "gpustack", "precise"


@dataclass(frozen=True, slots=True)
class Chain:
    """The plugin chain a decision runs: worker filters, then strategies in order, then the scorer.

    ``max_candidates`` reports at most this many candidates (None: all,
    GPUStack's behaviour); the selected one is always kept, the rest are the
    best-scoring, in selector order. ``scorer`` None means the policy's own
    (:data:`scheduler_core.plugins.SCORERS_BY_POLICY`). ``settings`` are the
    precise rules' knobs (GPU sharing, margins). ``policy: gpustack`` parity
    holds for :data:`scheduler_core.plugins.DEFAULT_CHAIN` only.
    """

    filters: tuple[WorkerFilter, ...]
    strategies: tuple[Strategy, ...]
    max_candidates: int | None = None
    scorer: Scorer | None = None
    settings: PreciseSettings = _DEFAULT_SETTINGS

    @property
    def policy(self) -> str:
        """``precise`` when any strategy belongs to that policy, else ``gpustack``."""
        if any(getattr(strategy, "policy", GPUSTACK) == PRECISE for strategy in self.strategies):
            return PRECISE
        return GPUSTACK


@dataclass(frozen=True, slots=True)
class FilterChainOutcome:
    """Surviving workers, all filter messages in order, and the blocking reason if any."""

    workers: tuple[WorkerView, ...]
    messages: tuple[str, ...]
    blocked_by: Reason | None


def run_filters(
    model: ModelSpec, workers: Sequence[WorkerView], filters: Sequence[WorkerFilter]
) -> FilterChainOutcome:
    """Apply ``filters`` in order, stopping at the first that leaves no worker
    (``policies/base.py: WorkerFilterChain.filter``)."""
    current = tuple(workers)
    messages: list[str] = []
    for worker_filter in filters:
        outcome = worker_filter(model, current)
        messages.extend(outcome.messages)
        current = outcome.workers
        if not current:
            return FilterChainOutcome(current, tuple(messages), outcome.reason)
    return FilterChainOutcome(current, tuple(messages), None)


def passes_filters(model: ModelSpec, worker: WorkerView, filters: Sequence[WorkerFilter]) -> bool:
    """Whether ``worker`` alone would pass every filter for ``model``."""
    return bool(run_filters(model, (worker,), filters).workers)


@dataclass(frozen=True, slots=True)
class SelectorOutcome:
    """Candidates in selector order, GPUStack's messages, the events, the deciding stage."""

    candidates: tuple[Candidate, ...]
    messages: tuple[str, ...]
    events: tuple[Event, ...]
    stage: str | None


def _set_messages(selection: Selection) -> None:
    """GPUStack's ``_set_messages``: assemble the message once, from the events."""
    log = selection.log
    if not log.messages:
        log.messages.append(log.events.assemble_message())


def run_strategies(selection: Selection, strategies: Sequence[Strategy]) -> SelectorOutcome:
    """Record the default message and run the strategies; the first with candidates wins
    (``SGLangResourceFitSelector.select_candidates``)."""
    log = selection.log
    log.events.add(Level.INFO, Action.DEFAULT, default_message(selection))
    for strategy in strategies:
        if strategy.skip(selection):
            continue
        candidates = strategy(selection)
        if len(candidates) == 1 and candidates[0].overcommit:
            _set_messages(selection)
        if candidates:
            return SelectorOutcome(tuple(candidates), tuple(log.messages), log.events.events, strategy.name)
    _set_messages(selection)
    return SelectorOutcome((), tuple(log.messages), log.events.events, None)


def wake_table(
    filters: Sequence[WorkerFilter], strategies: Sequence[Strategy]
) -> dict[ClusterChange, frozenset[Reason]]:
    """Per kind of cluster change, the reasons it can clear, from the plugins' declarations.

    A new snapshot clears every reason any plugin declares.
    """
    table: dict[ClusterChange, set[Reason]] = {change: set() for change in ClusterChange}
    declared = [f.clears for f in filters] + [s.clears for s in strategies]
    for clears in declared:
        for reason, changes in clears.items():
            for change in changes:
                table[change].add(reason)
            table[ClusterChange.SNAPSHOT].add(reason)
    return {change: frozenset(reasons) for change, reasons in table.items()}
