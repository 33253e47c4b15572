"""What a stage found: its candidates and the workers it failed, counted per reason.

Nomad's ``AllocMetric`` and kube's ``NodeToStatus``: a strategy returns a
:class:`StageOutcome`, never a bare list, so a parked request can say not
only *which stage* found nothing but *why not worker 7*. A stage tallies each
worker it considered and could not use under the :class:`~scheduler_core.Reason`
it gave, in the order it met them (:class:`FailureTally`); each reason keeps
its count of distinct workers and the first :data:`MAX_EXAMPLES` of them.
GPUStack's message texts stay in the decision log the stages record into
(:class:`~scheduler_core.selection.DecisionLog`), assembled once by
:func:`scheduler_core.framework.run_strategies`.
"""

from __future__ import annotations

import operator
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from scheduler_core.candidates import Candidate
from scheduler_core.reasons import Reason
from scheduler_core.workers import WorkerView

#: Example workers kept per reason: enough to point at, few enough to print on one line.
MAX_EXAMPLES = 5


@dataclass(frozen=True, slots=True)
class ReasonFailures:
    """The workers one stage failed for one reason.

    Attributes:
        stage: the stage's name.
        reason: why.
        workers: how many distinct workers.
        examples: the first of them, as ``(id, name)``, in the order the stage met them.
    """

    stage: str
    reason: Reason
    workers: int
    examples: tuple[tuple[int, str], ...]


@dataclass(frozen=True, slots=True)
class StageOutcome:
    """A stage's candidates, in its order, and its failures per reason (in first-met order)."""

    candidates: Sequence[Candidate]
    failures: tuple[ReasonFailures, ...] = ()


@dataclass(frozen=True, slots=True)
class CandidateRuns:
    """A stage's candidates as the runs of one worker each they were joined from: the runner
    keeps a worker's run (the same object) while the worker is unchanged, so a scorer can keep
    a run's scores across decisions. Filed in the decision's :class:`~scheduler_core.CycleState`
    by the stage; ``candidates`` is the very tuple the stage returned.

    Attributes:
        candidates: the stage's candidates (``slots`` joined in order).
        slots: per worker the stage walked, in its order, that worker's run (empty: none).
        key: what the runs are computed from besides the workers (the stage and its rule's
            inputs per GPU type), by equality.
        layout: the worker sequences the slots follow, one per GPU type, by identity: equal
            keys and the same layout put the same worker at each position.
    """

    candidates: tuple[Candidate, ...]
    slots: tuple[Sequence[Candidate], ...]
    key: Hashable
    layout: tuple[Sequence[WorkerView], ...]

    @property
    def runs(self) -> tuple[Sequence[Candidate], ...]:
        """The non-empty runs, in order."""
        return tuple(filter(None, self.slots))


@dataclass(slots=True)
class FailureTally:
    """One stage's failures while it runs (a worker counted once per reason).

    Workers are only appended while the stage runs (thousands on a large cluster, at C
    speed); the counts and examples are made once, by :meth:`outcome`.
    """

    stage: str
    _by_reason: dict[Reason, list[WorkerView]] = field(default_factory=dict)

    def add(self, reason: Reason, worker: WorkerView) -> None:
        """Count ``worker`` as failed for ``reason`` (again: no change)."""
        self._by_reason.setdefault(reason, []).append(worker)

    def add_all(self, reason: Reason, workers: Iterable[WorkerView]) -> None:
        """Count every worker of ``workers`` as failed for ``reason``."""
        self._by_reason.setdefault(reason, []).extend(workers)

    def outcome(self, candidates: Sequence[Candidate]) -> StageOutcome:
        """The stage's outcome: ``candidates`` and the tallied failures."""
        failures = tuple(_failures(self.stage, reason, found) for reason, found in self._by_reason.items())
        return StageOutcome(candidates, failures)


_WORKER_ID = operator.attrgetter("id")


def _failures(stage: str, reason: Reason, workers: list[WorkerView]) -> ReasonFailures:
    """The distinct workers' count and the first :data:`MAX_EXAMPLES` of them."""
    examples: dict[int, str] = {}
    for worker in workers:
        examples.setdefault(worker.id, worker.name)
        if len(examples) == MAX_EXAMPLES:
            break
    return ReasonFailures(stage, reason, len(set(map(_WORKER_ID, workers))), tuple(examples.items()))
