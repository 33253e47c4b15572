"""Precise stage 1: one worker, one or more GPUs, sliding-window GPU sets.

Per worker, for the fewest GPUs that can hold the model (the requested world
size, or auto tp = n), every balanced window of its GPUs that passes the
per-rank fit (:mod:`scheduler_core.precise.fit`) becomes a candidate with its
own fraction, bookings and predicted KV tokens. A worker that cannot hold the
model reports the best miss: the one with the most usable memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import ClassVar

from scheduler_core.accounting import Allocatable
from scheduler_core.arguments import TpRule
from scheduler_core.caching import Rule
from scheduler_core.candidates import Candidate, Claim
from scheduler_core.cluster import ram_not_enough
from scheduler_core.cycle import CycleState, DecisionInputs
from scheduler_core.estimate import RamClaimRule
from scheduler_core.events import Action, Level, list_message
from scheduler_core.framework import Clears
from scheduler_core.memo import SlotKey
from scheduler_core.outcomes import FailureTally, StageOutcome
from scheduler_core.precise.facts import PreciseFacts, facts_of
from scheduler_core.precise.facts import prepare as prepare_facts
from scheduler_core.precise.fit import Fit, Miss, Slot, Verdicts, budget_of, room, usable, verdict_of
from scheduler_core.precise.messages import miss_line
from scheduler_core.precise.wake import floor_for, widest
from scheduler_core.precise.windows import balance, layouts, sorted_slots, window_starts
from scheduler_core.reasons import MORE_CAPACITY, Reason
from scheduler_core.selection import Selection
from scheduler_core.wake import GpuFloor, WakeQuery
from scheduler_core.workers import Gpu, WorkerView


@dataclass(frozen=True, slots=True)
class _Inputs:
    """The rule's signature."""

    facts: PreciseFacts
    gpu_type: str | None
    gpu_count: int | None
    tp_rule: TpRule
    ram_claim: int
    ram_rule: RamClaimRule
    #: The verdict for a GPU set and tp/pp: a pure function of ``facts`` (the caching layer
    #: hands in one that decides each distinct set once, see :func:`verdicts_of`).
    verdicts: Verdicts


@dataclass(frozen=True, slots=True)
class _Outcome:
    """One worker shape's verdict: fitting GPU sets (indexes, fit), else the best miss."""

    fits: tuple[tuple[tuple[int, ...], Fit], ...]
    miss: Miss | None
    gpus: int  # GPUs of the set the miss is about


def slots_of(gpus: tuple[Gpu, ...], allocatable: Allocatable) -> list[Slot]:
    """The worker's indexed GPUs with memory, with their free bytes."""
    return [(g, usable(g, allocatable)) for g in gpus if g.index is not None and g.total]


def _evaluate(inputs: _Inputs, gpus: tuple[Gpu, ...], allocatable: Allocatable) -> _Outcome:
    if ram_not_enough(inputs.ram_claim, allocatable):
        return _Outcome((), None, 0)
    ordered = sorted_slots(slots_of(gpus, allocatable))
    rooms = tuple(room(slot) for slot in ordered)
    frees = [r[2] for r in rooms]
    indexes = [gpu.index or 0 for gpu, _ in ordered]
    # On a worker whose GPUs are all of one size every check is monotone in usable memory:
    # once the roomiest remaining window misses, every tighter one misses too.
    uniform = len({r[:2] for r in rooms}) <= 1
    best: tuple[Miss, int] | None = None
    limit = inputs.facts.settings.max_window_candidates
    for count, tp, pp in layouts(inputs.facts, inputs.gpu_count, len(ordered), inputs.tp_rule):
        fits: list[tuple[tuple[int, ...], Fit]] = []
        for start in window_starts(frees, count, balance(inputs.facts, tp)):
            verdict = inputs.verdicts((rooms[start : start + count], tp, pp))
            if isinstance(verdict, Fit):
                fits.append((tuple(indexes[start : start + count]), verdict))
                continue
            if best is None or verdict.usable > best[0].usable:
                best = (verdict, count)
            if uniform:
                break
        if fits:
            return _Outcome(tuple(reversed(fits))[:limit], None, count)
    return _Outcome((), None if best is None else best[0], 0 if best is None else best[1])


@dataclass(frozen=True, slots=True)
class _WorkerResult:
    candidates: tuple[Candidate, ...]
    miss: Miss | None
    gpus: int


def claim_of(fit: Fit, indexes: tuple[int, ...], ram_rule: RamClaimRule) -> Claim:
    """The claim of one node of a fitting placement."""
    vram = dict(zip(indexes, fit.bookings, strict=True))
    return Claim(vram, ram_rule.ram_for(vram), fit.fraction, fit.need * len(indexes))


def _attach(inputs: _Inputs, worker: WorkerView, outcome: _Outcome) -> _WorkerResult:
    candidates = tuple(
        Candidate(
            worker, inputs.gpu_type, indexes, claim_of(fit, indexes, inputs.ram_rule), kv_tokens=fit.kv_tokens
        )
        for indexes, fit in outcome.fits
    )
    return _WorkerResult(candidates, outcome.miss, outcome.gpus)


#: The per-rank budgets by GPU size and layout, and the verdicts by GPU set and layout.
BUDGETS, VERDICTS = SlotKey("precise_budget"), SlotKey("precise_verdict")

_RULE = Rule("precise_single_worker", _evaluate, _attach, reads_reported=True)


class PreciseSingleWorker:
    """One worker: balanced GPU sets of the fewest GPUs that hold the model."""

    name = "precise_single_worker"
    policy: ClassVar[str] = "precise"
    clears: ClassVar[Clears] = {
        Reason.WEIGHTS_DO_NOT_FIT: MORE_CAPACITY,
        Reason.KV_FLOOR_NOT_MET: MORE_CAPACITY,
        Reason.KV_TOKENS_BELOW_MINIMUM: MORE_CAPACITY,
        Reason.INSUFFICIENT_VRAM: MORE_CAPACITY,
        Reason.NO_BALANCED_GPU_SET: MORE_CAPACITY,
    }

    def prepare(self, inputs: DecisionInputs, state: CycleState) -> None:
        """The request's :class:`PreciseFacts` (shared with the multi-worker stage)."""
        prepare_facts(inputs, state)

    def wake_floor(self, query: WakeQuery) -> GpuFloor:
        """The least a layout of the widest worker's GPUs (tp = n, pp = 1 for every n) needs on
        each GPU; without the decision's facts, context plus a quarter of the weights over
        them (:mod:`scheduler_core.precise.wake`)."""
        most = widest(query.workers)
        return floor_for(query, most, [(n, 1) for n in range(1, most + 1)])

    def skip(self, selection: Selection) -> bool:
        """Manual selection runs GPUStack's manual stage."""
        return bool(selection.selected_workers)

    def __call__(self, selection: Selection) -> StageOutcome:
        """Every fitting GPU set of every worker, by GPU type and worker order; a worker
        whose best GPU set misses fails with the reason of that miss."""
        facts = facts_of(selection)
        tally = FailureTally(self.name)
        candidates: list[Candidate] = []
        best: tuple[Miss, int, WorkerView] | None = None
        verdicts = verdicts_of(selection, facts)
        for gpu_type, workers in selection.workers_by_type.items():
            inputs = _Inputs(
                facts,
                gpu_type,
                selection.gpu_count,
                selection.tp_rule,
                selection.ram_claim,
                selection.ram_rule,
                verdicts,
            )
            for worker, result in selection.runner.run(_RULE, inputs, gpu_type, workers):
                candidates.extend(result.candidates)
                miss = result.miss
                if miss is not None and not result.candidates:
                    tally.add(miss.reason, worker)
                    if best is None or miss.usable > best[0].usable:
                        best = (miss, result.gpus, worker)
        if not candidates:
            _record(selection, facts, best)
        return tally.outcome(candidates)


def verdicts_of(selection: Selection, facts: PreciseFacts) -> Verdicts:
    """The request's verdicts for this decision, shared by both precise strategies: each distinct
    GPU set (totals, platform, usable memory) and tp/pp is decided once, each budget (GPU size
    and tp/pp) computed once (with a memo, also across decisions for the same facts)."""
    runner = selection.runner
    budgets = runner.memoized(BUDGETS, facts, partial(budget_of, facts))
    return runner.memoized(VERDICTS, facts, partial(verdict_of, facts, budgets))


def _record(selection: Selection, facts: PreciseFacts, best: tuple[Miss, int, WorkerView] | None) -> None:
    if best is None:
        line = "No worker has a set of GPUs within 0.9 of each other's free memory large enough to try."
        reason = Reason.NO_BALANCED_GPU_SET
    else:
        miss, gpus, worker = best
        line = miss_line(facts, miss, f"the largest worker ({worker.name})", gpus)
        reason = miss.reason
    selection.log.events.add(Level.INFO, Action.AUTO_SINGLE_WORKER_MULTI_GPU, list_message(line), reason)
