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
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Generic, TypeVar, overload

from scheduler_core import fenwick
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


_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class RunsPart(Generic[_T]):
    """One sequence of runs (one GPU type's workers), with the Fenwick tree of their lengths
    (:mod:`scheduler_core.fenwick`) and their total; nothing changes it once made."""

    runs: tuple[Sequence[_T], ...]
    tree: list[int]
    size: int


class JoinedRuns(Sequence[Candidate]):
    """A stage's candidates: its runs (one worker's each) joined in order, without a copy.

    Its length is the parts' totals; a candidate by position is found in O(log n) through
    its part's Fenwick tree; iteration walks the runs. A decision reads a few candidates
    (the pick, the shown) of thousands, so joining them into a tuple would cost more than
    everything read from them.
    """

    __slots__ = ("_parts", "_size")

    def __init__(self, parts: Sequence[RunsPart[Candidate]]) -> None:
        self._parts = tuple(part for part in parts if part.size)
        self._size = sum(part.size for part in self._parts)

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Candidate]:
        return chain.from_iterable(chain.from_iterable(part.runs for part in self._parts))

    @overload
    def __getitem__(self, index: int) -> Candidate: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Candidate, ...]: ...

    def __getitem__(self, index: int | slice) -> Candidate | tuple[Candidate, ...]:
        if isinstance(index, slice):
            return tuple(self)[index]
        position = index + self._size if index < 0 else index
        if not 0 <= position < self._size:
            raise IndexError("candidate index out of range")
        for part in self._parts:
            if position < part.size:
                slot, at = fenwick.locate(part.tree, position)
                return part.runs[slot][at]
            position -= part.size
        raise IndexError("candidate index out of range")  # unreachable: the sizes add up


def join_runs(
    slots: Sequence[Sequence[Candidate]], parts: Sequence[RunsPart[Candidate] | None]
) -> Sequence[Candidate]:
    """A stage's candidates from its runs in order: lazily (:class:`JoinedRuns`) when every
    part came with its lengths' tree (a memo keeps them), else joined into a tuple."""
    if parts and None not in parts:
        return JoinedRuns([part for part in parts if part is not None])
    return tuple(chain.from_iterable(slots))


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

    candidates: Sequence[Candidate]
    slots: tuple[Sequence[Candidate], ...]
    key: Hashable
    layout: tuple[Sequence[WorkerView], ...]
    #: Per GPU type, the kept run the slots were read from and its version (None without a
    #: memo): a scorer that last saw those versions takes the changed slots from its log.
    lineage: tuple[tuple[Any, int], ...] = ()

    @property
    def runs(self) -> tuple[Sequence[Candidate], ...]:
        """The non-empty runs, in order."""
        return tuple(filter(None, self.slots))


@dataclass(frozen=True, slots=True)
class _Picked:
    """Workers of a stage's run, by position: ``ran[p][0]`` for each ``p`` of ``positions``
    (ascending, each a distinct worker of the run), left as positions until counted."""

    ran: Sequence[Sequence[Any]]
    positions: Sequence[int]

    def workers(self) -> Iterator[WorkerView]:
        """The workers, in position order."""
        ran = self.ran
        return (ran[position][0] for position in self.positions)


_Chunk = list[WorkerView] | _Picked


@dataclass(slots=True)
class FailureTally:
    """One stage's failures while it runs (a worker counted once per reason).

    Workers are only appended while the stage runs (thousands on a large cluster, at C
    speed, or as positions into the stage's run: :meth:`add_positions`); the counts and
    examples are made once, by :meth:`outcome`.
    """

    stage: str
    _by_reason: dict[Reason, list[_Chunk]] = field(default_factory=dict)

    def add(self, reason: Reason, worker: WorkerView) -> None:
        """Count ``worker`` as failed for ``reason`` (again: no change)."""
        chunks = self._by_reason.setdefault(reason, [])
        last = chunks[-1] if chunks else None
        if isinstance(last, list):
            last.append(worker)
        else:
            chunks.append([worker])

    def add_all(self, reason: Reason, workers: Iterable[WorkerView]) -> None:
        """Count every worker of ``workers`` as failed for ``reason``."""
        self._by_reason.setdefault(reason, []).append(list(workers))

    def add_positions(self, reason: Reason, ran: Sequence[Sequence[Any]], positions: Sequence[int]) -> None:
        """Count the workers ``ran[p][0]`` at ``positions`` of a stage's run as failed for ``reason``.

        ``ran`` holds each worker once (one entry per worker the stage walked), and the
        positions tallied from one ``ran`` for one reason never repeat: then the count is
        the positions' count, without visiting the workers (thousands fail a large request).
        """
        self._by_reason.setdefault(reason, []).append(_Picked(ran, positions))

    def outcome(self, candidates: Sequence[Candidate]) -> StageOutcome:
        """The stage's outcome: ``candidates`` and the tallied failures."""
        failures = tuple(_failures(self.stage, reason, chunks) for reason, chunks in self._by_reason.items())
        return StageOutcome(candidates, failures)


_WORKER_ID = operator.attrgetter("id")


def _failures(stage: str, reason: Reason, chunks: list[_Chunk]) -> ReasonFailures:
    """The distinct workers' count and the first :data:`MAX_EXAMPLES` of them."""
    examples: dict[int, str] = {}
    for worker in _workers(chunks):
        examples.setdefault(worker.id, worker.name)
        if len(examples) == MAX_EXAMPLES:
            break
    return ReasonFailures(stage, reason, _distinct(chunks), tuple(examples.items()))


def _distinct(chunks: list[_Chunk]) -> int:
    """How many distinct workers the chunks name: the positions' count when every chunk is
    positions into one run (distinct by :meth:`FailureTally.add_positions`' terms)."""
    first = chunks[0]
    if isinstance(first, _Picked):
        picked = [chunk for chunk in chunks if isinstance(chunk, _Picked) and chunk.ran is first.ran]
        if len(picked) == len(chunks):
            return sum(len(chunk.positions) for chunk in picked)
    return len(set(map(_WORKER_ID, _workers(chunks))))


def _workers(chunks: list[_Chunk]) -> Iterator[WorkerView]:
    """The chunks' workers, in tally order (repeats possible)."""
    return chain.from_iterable(chunk.workers() if isinstance(chunk, _Picked) else chunk for chunk in chunks)
