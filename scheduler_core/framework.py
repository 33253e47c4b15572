"""The plugin seams of a decision: worker filters and placement strategies.

Like kube-scheduler's framework, each plugin is a small unit behind a typed
protocol that reports *why* it rejected something with a :class:`Reason`, and
declares which :class:`ClusterChange` kinds can clear each of its reasons
(``clears``, kube's ``EventsToRegister``). :func:`wake_table` derives, from a
chain's plugins, which reasons each kind of change can clear: the table a
service parks unplaced requests by.

The seam knows no policy. A strategy builds the facts only it reads in its
``prepare`` step (kube's ``PreFilter`` writing its ``CycleState`` entry,
:mod:`scheduler_core.cycle`) and answers for its own rejections which freed
GPUs could place the request (``wake_floor``, kube's ``QueueingHint``,
:mod:`scheduler_core.wake`). What a policy changes around its strategies (the
headline message, whether ``replaces`` is honoured, which fraction the
estimate reports) is data on its :class:`Policy`, found by name in the
registry (:mod:`scheduler_core.plugins`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from scheduler_core._schemas import ModelSpec
from scheduler_core.candidates import Candidate
from scheduler_core.cycle import CycleState, DecisionInputs, PolicySettings
from scheduler_core.events import Action, Event, Level
from scheduler_core.outcomes import JoinedRuns, ReasonFailures, StageOutcome
from scheduler_core.ranking import Ranking
from scheduler_core.reasons import ClusterChange, Reason
from scheduler_core.selection import Selection
from scheduler_core.wake import GpuFloor, WakeQuery, union_of
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

    def prepare(self, inputs: DecisionInputs, state: CycleState) -> None:
        """File the facts this strategy reads in ``state`` (once per decision, before any
        strategy runs; a type another strategy prepared is reused).

        Raises:
            RequestError: the request is invalid under this strategy's rules.
        """
        ...

    def wake_floor(self, query: WakeQuery) -> GpuFloor | None:
        """The least a freed GPU must offer to be part of one of this strategy's candidates
        for the parked request (:data:`~scheduler_core.wake.ANY_GPU`: any GPU could);
        None when the strategy does not run for it."""
        ...

    def skip(self, selection: Selection) -> bool:
        """True when GPUStack's ``should_skip_candidate_func`` skips this stage."""
        ...

    def __call__(self, selection: Selection) -> StageOutcome:
        """Candidates on the selection's filtered workers, and the workers failed per reason."""
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


@runtime_checkable
class KeptRanking(Protocol):
    """A scorer that may keep its scores across decisions (with a memo) and rank without
    scoring every candidate again; the same pick and scores as its ``score`` and ``pick``."""

    def rank(self, candidates: Sequence[Candidate], selection: Selection) -> Ranking | None:
        """The ranking of ``candidates``, or None to have them scored and picked as usual."""
        ...


#: A chain that carries no settings (every policy reads its defaults).
NO_SETTINGS = PolicySettings()

#: The policy of a chain whose strategies name no other: GPUStack's (the core's reference).
GPUSTACK = "gpustack"

#: The first message a decision records (the estimate headline), from its selection.
Headline = Callable[[Selection], str]


@dataclass(frozen=True, slots=True)
class Policy:
    """A placement policy: its strategies and scorer, and what it changes around them.

    Attributes:
        name: what requests name in ``policy``.
        strategies: its stages, in order.
        scorer: the scorer of a chain that names none.
        headline: the first message of its decisions.
        leaves_out_replaced: ``replaces`` must name an instance row, whose claim is not
            counted (GPUStack counts every instance).
        candidate_fraction: the result's estimate reports the chosen candidate's fraction
            (the policy sizes a fraction per candidate, not per GPU type).
    """

    name: str
    strategies: tuple[Strategy, ...]
    scorer: Scorer
    headline: Headline
    leaves_out_replaced: bool = False
    candidate_fraction: bool = False


@dataclass(frozen=True, slots=True)
class Chain:
    """The plugin chain a decision runs: worker filters, then strategies in order, then the scorer.

    ``max_candidates`` reports at most this many candidates (None: all,
    GPUStack's behaviour); the selected one is always kept, the rest are the
    best-scoring, in selector order. ``scorer`` None means the policy's own
    (:func:`scheduler_core.plugins.scorer_of`). ``settings`` are the policies'
    knobs, one object per type (``policy: precise``'s GPU sharing, margins).
    ``policy: gpustack`` parity holds for :data:`scheduler_core.plugins.DEFAULT_CHAIN` only.
    """

    filters: tuple[WorkerFilter, ...]
    strategies: tuple[Strategy, ...]
    max_candidates: int | None = None
    scorer: Scorer | None = None
    settings: PolicySettings = NO_SETTINGS

    def __post_init__(self) -> None:
        if not isinstance(self.settings, PolicySettings):  # a bare settings object: say so now
            raise TypeError(f"Chain.settings must be a PolicySettings, not {type(self.settings).__name__}")

    @property
    def policy(self) -> str:
        """The first policy a strategy names other than :data:`GPUSTACK`, else ``gpustack``."""
        for strategy in self.strategies:
            named = getattr(strategy, "policy", GPUSTACK)
            if named != GPUSTACK:
                return str(named)
        return GPUSTACK

    def prepare(self, inputs: DecisionInputs) -> CycleState:
        """Every strategy's ``prepare``, in order: the decision's state (PreFilter).

        Raises:
            RequestError: a strategy refuses the request.
        """
        state = CycleState()
        for strategy in self.strategies:
            strategy.prepare(inputs, state)
        return state

    def wake_floor(self, query: WakeQuery) -> GpuFloor:
        """The union of the strategies' wake floors for a parked request."""
        return union_of(strategy.wake_floor(query) for strategy in self.strategies)


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
    """Candidates in selector order (an immutable sequence: a tuple, or a stage's runs joined
    without a copy), GPUStack's messages, the events, the deciding stage, and the failures
    per reason of every stage that ran (in stage order)."""

    candidates: Sequence[Candidate]
    messages: tuple[str, ...]
    events: tuple[Event, ...]
    stage: str | None
    failures: tuple[ReasonFailures, ...] = ()


def _set_messages(selection: Selection) -> None:
    """GPUStack's ``_set_messages``: assemble the message once, from the events."""
    log = selection.log
    if not log.messages:
        log.messages.append(log.events.assemble_message())


def run_strategies(
    selection: Selection, strategies: Sequence[Strategy], headline: Headline
) -> SelectorOutcome:
    """Record the policy's headline and run the strategies; the first with candidates wins
    (``SGLangResourceFitSelector.select_candidates``)."""
    log = selection.log
    log.events.add(Level.INFO, Action.DEFAULT, headline(selection))
    failures: list[ReasonFailures] = []
    for strategy in strategies:
        if strategy.skip(selection):
            continue
        outcome = strategy(selection)
        candidates = outcome.candidates
        failures += outcome.failures
        if len(candidates) == 1 and candidates[0].overcommit:
            _set_messages(selection)
        if candidates:
            return _outcome(selection, candidates, strategy.name, failures)
    _set_messages(selection)
    return _outcome(selection, (), None, failures)


def _outcome(
    selection: Selection, candidates: Sequence[Candidate], stage: str | None, failures: list[ReasonFailures]
) -> SelectorOutcome:
    log = selection.log
    kept = candidates if isinstance(candidates, tuple | JoinedRuns) else tuple(candidates)  # no copy of those
    return SelectorOutcome(kept, tuple(log.messages), log.events.events, stage, tuple(failures))


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
