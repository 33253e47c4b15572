"""Balanced GPU sets by sliding window, and the parallel layouts a request allows.

GPUStack cuts a worker's GPUs into fixed 0.9 memory groups and misses sets that
straddle a cut. Here the GPUs are sorted by usable memory (then index) and every
run of ``n`` consecutive GPUs whose smallest usable memory is at least 0.9 × the
largest is a candidate set: the same balance SGLang's TP ranks are checked for
at start-up (free memory of every rank ≥ 0.9 × the local one).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from scheduler_core.arguments import TpRule
from scheduler_core.cluster import MEMORY_BALANCE_RATIO
from scheduler_core.precise.facts import PreciseFacts
from scheduler_core.precise.fit import Slot


def sorted_slots(slots: Sequence[Slot]) -> list[Slot]:
    """Slots by usable memory, then GPU index (deterministic)."""
    return sorted(slots, key=lambda slot: (slot[1], slot[0].index or 0))


def balanced(frees: Sequence[int]) -> bool:
    """``min(usable) ≥ 0.9 × max(usable)`` (and something usable at all)."""
    least = min(frees)
    return least > 0 and least >= MEMORY_BALANCE_RATIO * max(frees)


def windows(ordered: Sequence[Slot], size: int) -> Iterator[tuple[Slot, ...]]:
    """Every balanced run of ``size`` consecutive slots of ``ordered`` (sorted by usable), tightest first."""
    frees = [free for _, free in ordered]
    for start in reversed(list(window_starts(frees, size))):
        yield tuple(ordered[start : start + size])


def window_starts(frees: Sequence[int], size: int) -> Iterator[int]:
    """Where every balanced run of ``size`` consecutive values of ``frees`` starts, roomiest first.

    ``frees`` is ascending (:func:`sorted_slots` order), so a run's least and largest
    values are its ends and :func:`balanced` needs no scan.
    """
    for start in range(len(frees) - size, -1, -1):
        least = frees[start]
        if least > 0 and least >= MEMORY_BALANCE_RATIO * frees[start + size - 1]:
            yield start


def layouts(
    facts: PreciseFacts, gpu_count: int | None, available: int, tp_rule: TpRule
) -> list[tuple[int, int, int]]:
    """``(gpus, tp, pp)`` one worker may run, fewest GPUs first.

    With a world size (the user's tp/pp/dp) there is exactly one: ``tp × pp × dp``
    GPUs (dp replicas each a full copy). Without one, ``n`` GPUs run tp = n for
    every n up to ``available`` that passes GPUStack's TP divisibility checks.
    """
    if gpu_count:
        tp, pp = facts.tp or 1, facts.pp or 1
        return [(gpu_count, tp, pp)] if gpu_count <= available else []
    return [(n, n, 1) for n in range(1, available + 1) if tp_rule.divisible(n)]
