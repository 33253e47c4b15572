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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import islice

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


@dataclass(slots=True)
class FailureTally:
    """One stage's failures while it runs (a worker counted once per reason)."""

    stage: str
    _by_reason: dict[Reason, dict[int, str]] = field(default_factory=dict)

    def add(self, reason: Reason, worker: WorkerView) -> None:
        """Count ``worker`` as failed for ``reason`` (again: no change)."""
        self._by_reason.setdefault(reason, {})[worker.id] = worker.name

    def add_all(self, reason: Reason, workers: Iterable[WorkerView]) -> None:
        """Count every worker of ``workers`` as failed for ``reason``."""
        seen = self._by_reason.setdefault(reason, {})
        for worker in workers:
            seen[worker.id] = worker.name

    def outcome(self, candidates: Sequence[Candidate]) -> StageOutcome:
        """The stage's outcome: ``candidates`` and the tallied failures."""
        failures = tuple(
            ReasonFailures(self.stage, reason, len(seen), tuple(islice(seen.items(), MAX_EXAMPLES)))
            for reason, seen in self._by_reason.items()
        )
        return StageOutcome(candidates, failures)
