"""Stage 2: one worker, one GPU
(``sglang_resource_fit_selector.py: find_single_worker_single_gpu_full_offloading_candidates``).

Every GPU that fits becomes a candidate; the scorer picks among them. A GPU
fits an LLM when ``claim ≤ total × fraction`` and its allocatable share is at
least the fraction; a diffusion model only needs ``claim ≤ total``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from operator import attrgetter, itemgetter
from typing import ClassVar

from scheduler_core._units import byte_to_gib
from scheduler_core.accounting import Allocatable
from scheduler_core.caching import Rule, joined, none_positions
from scheduler_core.candidates import Candidate, Claim
from scheduler_core.cluster import ram_not_enough
from scheduler_core.estimate import RamClaimRule
from scheduler_core.events import Action, Level, list_message
from scheduler_core.framework import Clears
from scheduler_core.memo import Memoized, SlotKey
from scheduler_core.outcomes import CandidateRuns, FailureTally, RunsPart, StageOutcome, join_runs
from scheduler_core.reasons import MORE_CAPACITY, Reason
from scheduler_core.selection import Selection
from scheduler_core.strategies.stage import GpustackStage
from scheduler_core.workers import Gpu, WorkerView


@dataclass(frozen=True, slots=True)
class _Inputs:
    """Every decision input the per-worker rule reads (its signature)."""

    vram_claim: int
    ram_claim: int
    fraction: float
    utilization: float | None
    diffusion: bool
    ram_rule: RamClaimRule
    #: A fitting GPU's ((index,), type, claim) by its index, type and total
    #: (:func:`_fitting`): equal for every worker's GPU of that size and index, so thousands
    #: of candidates share a few claims, made once and rendered once.
    fitted: Memoized[tuple[int, str | None, int], _Fit]


#: A fitting GPU as the rule keeps it: its index as a candidate's indexes, its type, its claim.
_Fit = tuple[tuple[int], str | None, Claim]
#: The rule's fitting GPUs by index, type and total, per claim-making inputs.
_FITTED = SlotKey("single_gpu_fitted")


def _fitting(
    vram_claim: int, fraction: float, utilization: float | None, diffusion: bool, ram_rule: RamClaimRule,
    gpu: tuple[int, str | None, int],
) -> _Fit:
    """``_get_worker_resource_claim`` for one GPU (index, type, total): total × fraction, or
    the whole estimate."""
    index, kind, total = gpu
    vram = {index: vram_claim if diffusion else int(total * fraction)}
    return (index,), kind, Claim(vram, ram_rule.ram_for(vram), utilization, vram_claim)


@dataclass(frozen=True, slots=True)
class _WorkerOutcome:
    """One worker's verdict: fitting GPUs ((index,), type, claim), or the failure message."""

    fits: tuple[_Fit, ...]
    message: str | None


def _fits(inputs: _Inputs, gpus: tuple[Gpu, ...], allocatable: Allocatable) -> _WorkerOutcome:
    """The stage's rule for one worker's GPUs."""
    if ram_not_enough(inputs.ram_claim, allocatable) or not gpus:
        return _WorkerOutcome((), None)
    fraction, diffusion = inputs.fraction, inputs.diffusion
    largest_vram, largest_rate = 0, 0.0
    fits: list[_Fit] = []
    fitted = inputs.fitted
    for gpu in gpus:
        if not gpu.total or gpu.index is None:
            continue
        free = allocatable.vram.get(gpu.index, 0)
        rate = free / gpu.total
        if free > largest_vram:
            largest_vram, largest_rate = free, rate
        if inputs.vram_claim > gpu.total * (1 if diffusion else fraction):
            continue
        if not diffusion and rate < fraction:
            continue
        fits.append(fitted((gpu.index, gpu.type, gpu.total)))
    if fits:
        return _WorkerOutcome(tuple(fits), None)
    message = f"The current available GPU only has {byte_to_gib(largest_vram)} GiB allocatable VRAM."
    if fraction != 0 and not diffusion:
        message = message.rstrip(".") + f" ({(largest_rate * 100):.2f}%)."
    return _WorkerOutcome((), list_message(message))


@dataclass(frozen=True, slots=True)
class _WorkerCandidates:
    """One worker's part of the stage: its candidates, or the failure message."""

    candidates: tuple[Candidate, ...]
    message: str | None


def _candidates(inputs: _Inputs, worker: WorkerView, outcome: _WorkerOutcome) -> _WorkerCandidates:
    # Thousands per decision: made as the tuples they are, without the named tuple's Python __new__.
    fits = outcome.fits
    candidates = tuple([_new(Candidate, (worker, t, indexes, claim, *_UNSET)) for indexes, t, claim in fits])
    return _WorkerCandidates(candidates, outcome.message)


_new = tuple.__new__
#: A candidate's fields after its claim, at their defaults (every field after the claim has one).
_UNSET = tuple(Candidate._field_defaults.values())
if Candidate._fields[4:] != tuple(Candidate._field_defaults):
    raise TypeError("Candidate's fields after its claim must be the ones with defaults")
_RULE = Rule("single_worker_single_gpu", _fits, _candidates, reads_reported=False)
_WORKER = itemgetter(0)
_MESSAGE = attrgetter("message")
_CANDIDATES = attrgetter("candidates")
#: What the stage reads of each worker's part (kept with the run: :meth:`StageRunner.columns`).
_COLUMNS = (_CANDIDATES, _MESSAGE)


class SingleWorkerSingleGpu(GpustackStage):
    """Auto placement on a single GPU; skipped when more than one GPU is required."""

    name = "single_worker_single_gpu"
    clears: ClassVar[Clears] = {Reason.INSUFFICIENT_VRAM: MORE_CAPACITY}

    def skip(self, selection: Selection) -> bool:
        """Manual selection runs only the manual stage."""
        return bool(selection.selected_workers)

    def __call__(self, selection: Selection) -> StageOutcome:
        """All fitting single-GPU candidates, by GPU type, worker and GPU order; a worker
        with GPUs but none that fits fails with ``insufficient_vram``."""
        tally = FailureTally(self.name)
        if selection.gpu_count is not None and selection.gpu_count > 1:
            return tally.outcome(())
        slots: list[tuple[Candidate, ...]] = []
        keys: list[_Inputs] = []
        layout: list[Sequence[WorkerView]] = []
        parts: list[RunsPart[Candidate] | None] = []
        lineage: list[tuple[object, int]] = []
        failed: list[WorkerView] = []
        events = selection.log.events
        for gpu_type, workers in selection.workers_by_type.items():
            fraction, utilization = selection.fraction(gpu_type), selection.mfs(gpu_type)
            made = (selection.vram_claim, fraction, utilization, selection.is_diffusion, selection.ram_rule)
            inputs = _Inputs(
                selection.vram_claim, selection.ram_claim, fraction, utilization, selection.is_diffusion,
                selection.ram_rule, selection.runner.memoized(_FITTED, made, partial(_fitting, *made)),
            )
            columns = selection.runner.columns(_RULE, inputs, gpu_type, workers, _COLUMNS)
            runs, messages = columns.lists
            failing = none_positions(columns, 1, none=False)  # the workers with a failure message
            if failing:  # each distinct message once, first seen first: what the collector keeps
                for message in dict.fromkeys(map(messages.__getitem__, failing)):
                    events.add(Level.INFO, Action.AUTO_SINGLE_GPU, message, Reason.INSUFFICIENT_VRAM)
                failed += map(_WORKER, map(columns.results.__getitem__, failing))
            slots += runs
            keys.append(inputs)
            layout.append(workers)
            parts.append(joined(columns, runs))
            lineage.append((columns.run, columns.version))
        if failed:
            tally.add_all(Reason.INSUFFICIENT_VRAM, failed)
        candidates = join_runs(slots, parts)
        if candidates:
            key = (self.name, tuple(keys))
            filed = CandidateRuns(candidates, tuple(slots), key, tuple(layout), tuple(lineage))
            selection.state.prepare(CandidateRuns, lambda: filed)
        return tally.outcome(candidates)
