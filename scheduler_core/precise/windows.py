"""Balanced GPU sets by sliding window, and the parallel layouts a request allows.

GPUStack cuts a worker's GPUs into fixed 0.9 memory groups and misses sets that
straddle a cut. Here the GPUs are sorted by free memory (then index) and every run of
``n`` consecutive GPUs is a candidate set; at tp > 1 only runs SGLang's TP ranks pass at
start-up (``distributed/bootstrap.py: _check_tp_memory_balance``: the smallest free memory
after SGLang's context at least 0.9 × every rank's own), unless the model's env turns that
check off. At tp 1 (pp or dp only) SGLang checks nothing, and neither do the windows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from scheduler_core.arguments import TpRule
from scheduler_core.cluster import MEMORY_BALANCE_RATIO
from scheduler_core.precise.facts import PreciseFacts
from scheduler_core.precise.fit import Slot


def sorted_slots(slots: Sequence[Slot]) -> list[Slot]:
    """Slots by free memory, then GPU index (deterministic)."""
    return sorted(slots, key=lambda slot: (slot[1], slot[0].index or 0))


#: What a balance check needs: SGLang's context (subtracted from every free figure), and
#: whether it checks at all (tp > 1 and the check on).
Balance = tuple[int, bool]


def balance(facts: PreciseFacts, tp: int) -> Balance:
    """The balance check a set running ``tp`` must pass."""
    return facts.settings.sglang_context, tp > 1 and facts.balance_check


def _even(least: int, largest: int, check: Balance) -> bool:
    context, on = check
    return least > 0 and (not on or least - context >= MEMORY_BALANCE_RATIO * (largest - context))


def balanced(frees: Sequence[int], check: Balance) -> bool:
    """Something free on every GPU and, when checked, ``min − context ≥ 0.9 × (max − context)``."""
    return _even(min(frees), max(frees), check)


def windows(ordered: Sequence[Slot], size: int, check: Balance) -> Iterator[tuple[Slot, ...]]:
    """Every passing run of ``size`` consecutive slots of ``ordered`` (sorted by free), tightest first."""
    frees = [free for _, free in ordered]
    for start in reversed(list(window_starts(frees, size, check))):
        yield tuple(ordered[start : start + size])


def window_starts(frees: Sequence[int], size: int, check: Balance) -> Iterator[int]:
    """Where every passing run of ``size`` consecutive values of ``frees`` starts, roomiest first.

    ``frees`` is ascending (:func:`sorted_slots` order), so a run's least and largest
    values are its ends and the check needs no scan.
    """
    for start in range(len(frees) - size, -1, -1):
        if _even(frees[start], frees[start + size - 1], check):
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
