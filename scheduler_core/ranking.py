"""Which candidates a decision picks and reports: the first highest score and the best few.

A decision picks the first candidate with the highest score (GPUStack's strict
``>`` walk) and reports at most ``max_candidates`` of them: every candidate
scoring above the cut, then the earliest ties at it. :class:`ListRanking` reads
both off a full list of scores. :class:`SlotRanking` keeps them across
decisions for candidates that come in *slots* (one worker's run of candidates
each, in selector order, the same slot positions decision after decision): a
slot whose run is a new object is scored again, every other keeps its scores,
and the pick and the best few are read from per-score buckets, so a decision
that changed one worker costs that worker's run, not a walk over thousands of
candidates. Both give the same indexes and scores for the same candidates
(``tests/engine/test_ranking.py``).
"""

from __future__ import annotations

import heapq
import operator
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable, Container, Iterator, Sequence
from itertools import accumulate, chain, compress, count, islice, repeat
from typing import Protocol

from scheduler_core import fenwick
from scheduler_core.candidates import Candidate

#: A candidate's key in a bucket: its slot's position × STRIDE + its index in the slot's run
#: (keys in ascending order are candidates in selector order).
STRIDE_BITS = 16
STRIDE = 1 << STRIDE_BITS
_INDEX_MASK = STRIDE - 1

#: One slot: the candidates of one worker, in selector order (empty: none there).
Run = Sequence[Candidate]
#: The scores of one slot's run, in run order.
RunScores = Callable[[int, Run], list[float]]


class Ranking(Protocol):
    """The pick and the reported candidates of a decision, as positions in its candidates."""

    def best(self) -> int | None:
        """The position of the chosen candidate (None: there is none)."""
        ...

    def shown(self, limit: int | None, chosen: int | None) -> list[int]:
        """The positions to report, in selector order (see :func:`shown_candidates`)."""
        ...

    def score(self, position: int) -> float:
        """The score of the candidate at ``position`` (one of :meth:`best` or :meth:`shown`)."""
        ...


def shown_candidates(scores: Sequence[float], limit: int | None, chosen: int | None = None) -> list[int]:
    """Indexes of the candidates to report, in selector order.

    All of them without a ``limit``; otherwise the ``limit`` best-scoring
    (ties: earlier first), which always includes ``chosen`` (GPUStack's pick,
    the first highest score, ranks first anyway; a scorer with other tie-breaks
    may pick a later tie, which then takes the last tie's place).
    """
    if limit is None or len(scores) <= limit:
        return list(range(len(scores)))
    limit = max(limit, 1)
    # The limit-th highest score; every higher one is shown, then the earliest ties.
    cutoff = heapq.nlargest(limit, scores)[-1]
    # The few indexes at or above the cutoff, found without a Python loop over thousands of scores.
    at_least = list(compress(range(len(scores)), map(operator.ge, scores, repeat(cutoff))))
    above = [i for i in at_least if scores[i] > cutoff]
    ties = [i for i in at_least if scores[i] == cutoff][: limit - len(above)]
    shown = above + ties
    if chosen is not None and chosen not in shown:
        shown[-1] = chosen
    return sorted(shown)


class ListRanking:
    """A ranking read off every candidate's score (a scorer that keeps nothing across decisions)."""

    __slots__ = ("_chosen", "_scores")

    def __init__(self, scores: Sequence[float], chosen: int | None) -> None:
        self._scores = scores
        self._chosen = chosen

    def best(self) -> int | None:
        """The scorer's pick."""
        return self._chosen

    def shown(self, limit: int | None, chosen: int | None) -> list[int]:
        """:func:`shown_candidates` of the scores."""
        return shown_candidates(self._scores, limit, chosen)

    def score(self, position: int) -> float:
        """The score at ``position``."""
        return self._scores[position]


class SlotRanking:
    """Scores of candidates in slots, kept across decisions (see the module docstring).

    ``slots`` are the runs at fixed positions (an empty run: no candidate there); the
    candidates of a decision are the runs joined in slot order. Per distinct score, the
    keys of the candidates that have it, ascending (:data:`STRIDE`); the distinct scores,
    ascending; and the runs' lengths in a Fenwick tree, so a key's position among the
    joined candidates is a prefix count. A run holds fewer than :data:`STRIDE` candidates
    (:meth:`fits`).
    """

    __slots__ = ("_buckets", "_noted", "_order", "_scores", "_tree", "size", "slots")

    def __init__(self, slots: Sequence[Run], joined: Sequence[float]) -> None:
        """Rank ``slots`` whose runs joined have the scores ``joined`` (in that order).

        Built at C speed (each candidate's key appended to its score's bucket, in selector
        order): a ranking is built again whenever every score changes at once.
        """
        self.slots: list[Run] = list(slots)
        lengths = list(map(len, self.slots))
        ends = list(accumulate(lengths))
        starts = [0, *ends[:-1]]
        flat = list(joined)
        self._scores: list[list[float]] = list(map(flat.__getitem__, map(slice, starts, ends)))
        bases = [position << STRIDE_BITS for position in range(len(lengths))]
        keys = list(chain.from_iterable(map(range, bases, map(operator.add, bases, lengths))))
        self._order = sorted(set(flat))
        self._buckets: dict[float, list[int]] = {score: [] for score in self._order}
        # Consumed at C speed: keys come ascending, so each bucket is in selector order.
        deque(map(list.append, map(self._buckets.__getitem__, flat), keys), maxlen=0)
        self._tree = fenwick.build(lengths)
        self.size = len(keys)
        #: Scores of the positions handed out by the last :meth:`best` / :meth:`shown`.
        self._noted: dict[int, float] = {}

    @staticmethod
    def fits(slots: Sequence[Run]) -> bool:
        """Whether every run is short enough for a key (always, short of absurd workers)."""
        return max(map(len, slots), default=0) < STRIDE

    def changed(self, slots: Sequence[Run]) -> list[int]:
        """The positions whose run is not the very object this ranking holds there (as many
        slots as this ranking's)."""
        return list(compress(count(), map(operator.is_not, slots, self.slots)))

    def update(self, slots: Sequence[Run], positions: Sequence[int], scores_of: RunScores) -> None:
        """Take ``slots``, scoring again the runs at ``positions`` (every other is unchanged)."""
        for position in positions:
            run = slots[position]
            old = self._scores[position]
            new = scores_of(position, run) if run else []
            self._remove(position, old)
            self._add(position, new)
            self._scores[position] = new
            self.slots[position] = run
            if len(new) != len(old):
                fenwick.add(self._tree, position, len(new) - len(old))
                self.size += len(new) - len(old)

    def best(self) -> int | None:
        """The first candidate with the highest score."""
        self._noted = {}
        if not self._order:
            return None
        score = self._order[-1]
        return self._position(self._buckets[score][0], score)

    def shown(self, limit: int | None, chosen: int | None) -> list[int]:
        """Every candidate above the ``limit``-th highest score, then the earliest ties at it
        (all of them without a limit), with ``chosen`` in the last place if it is not among
        them; in selector order."""
        if limit is None or self.size <= limit:
            scores = list(chain.from_iterable(self._scores))
            self._noted = dict(enumerate(scores))
            return list(range(len(scores)))
        limit = max(limit, 1)
        taken: list[int] = []
        for score in reversed(self._order):
            for key in self._buckets[score][: limit - len(taken)]:
                taken.append(self._position(key, score))
            if len(taken) >= limit:
                break
        if chosen is not None and chosen not in taken:
            taken[-1] = chosen
        return sorted(taken)

    def score(self, position: int) -> float:
        """The score of a candidate :meth:`best` or :meth:`shown` handed out."""
        return self._noted[position]

    def overlaid(self, replaced: dict[int, list[float]]) -> Ranking:
        """This ranking with the scores of the runs at ``replaced``'s slots replaced by its
        lists (this decision only: the kept ranking is not changed)."""
        return _Overlaid(self, replaced)

    def ranked(self, skipped: Container[int] = ()) -> Iterator[tuple[float, int]]:
        """``(score, key)`` of every candidate, best first, earlier first among equal scores;
        the candidates of ``skipped`` slots left out."""
        buckets = self._buckets
        for score in reversed(self._order):
            for key in buckets[score]:
                if key >> STRIDE_BITS not in skipped:
                    yield score, key

    def flat(self) -> list[float]:
        """Every candidate's score, in selector order."""
        return list(chain.from_iterable(self._scores))

    def _position(self, key: int, score: float) -> int:
        slot = key >> STRIDE_BITS
        position = fenwick.prefix(self._tree, slot) + (key & _INDEX_MASK)
        self._noted[position] = score
        return position

    def position_of(self, key: int) -> int:
        """The position among the joined candidates of the candidate ``key`` names."""
        return fenwick.prefix(self._tree, key >> STRIDE_BITS) + (key & _INDEX_MASK)

    def _remove(self, slot: int, scores: list[float]) -> None:
        base = slot << STRIDE_BITS
        buckets = self._buckets
        for index, score in enumerate(scores):
            bucket = buckets[score]
            del bucket[bisect_left(bucket, base + index)]
            if not bucket:
                del buckets[score]
                del self._order[bisect_left(self._order, score)]

    def _add(self, slot: int, scores: list[float]) -> None:
        base = slot << STRIDE_BITS
        buckets = self._buckets
        for index, score in enumerate(scores):
            bucket = buckets.get(score)
            if bucket is None:
                buckets[score] = [base + index]
                insort(self._order, score)
            else:
                insort(bucket, base + index)


class _Overlaid:
    """A :class:`SlotRanking` with some slots scored otherwise for one decision (a model already
    running on those workers): both rankings merged, best first, earlier first among ties."""

    __slots__ = ("_base", "_extra", "_noted", "_replaced")

    def __init__(self, base: SlotRanking, replaced: dict[int, list[float]]) -> None:
        self._base = base
        self._replaced = replaced
        self._extra = sorted(
            (-score, (slot << STRIDE_BITS) + index)
            for slot, scores in replaced.items()
            for index, score in enumerate(scores)
        )
        self._noted: dict[int, float] = {}

    def _ranked(self) -> Iterator[tuple[float, int]]:
        extra = ((-negated, key) for negated, key in self._extra)
        return heapq.merge(self._base.ranked(self._replaced), extra, key=_BEST_FIRST)

    def best(self) -> int | None:
        """The first candidate with the highest score."""
        self._noted = {}
        first = next(self._ranked(), None)
        return None if first is None else self._position(first)

    def shown(self, limit: int | None, chosen: int | None) -> list[int]:
        """As :meth:`SlotRanking.shown`, over both rankings."""
        if limit is None or self._base.size <= limit:
            scores = self._flat()
            self._noted = dict(enumerate(scores))
            return list(range(len(scores)))
        taken = [self._position(item) for item in islice(self._ranked(), max(limit, 1))]
        if chosen is not None and chosen not in taken:
            taken[-1] = chosen
        return sorted(taken)

    def score(self, position: int) -> float:
        """The score of a candidate :meth:`best` or :meth:`shown` handed out."""
        return self._noted[position]

    def _flat(self) -> list[float]:
        base = self._base
        return list(chain.from_iterable(
            self._replaced.get(slot, scores) for slot, scores in enumerate(base._scores)
        ))

    def _position(self, item: tuple[float, int]) -> int:
        score, key = item
        position = self._base.position_of(key)
        self._noted[position] = score
        return position


def _best_first(item: tuple[float, int]) -> tuple[float, int]:
    return -item[0], item[1]


_BEST_FIRST = _best_first
