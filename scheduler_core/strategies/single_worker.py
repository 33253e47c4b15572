"""Stage 3: one worker, several GPUs
(``sglang_resource_fit_selector.py: find_single_worker_multi_gpu_full_offloading_candidates``).

Per worker, GPUs are partitioned into memory-balanced groups (0.9 rule); the
first group (smallest free memory first) whose GPUs all meet the fraction and
whose greedy, TP-divisible prefix covers the claim yields the worker's only
candidate.
"""

from __future__ import annotations

import operator
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress, count, islice, repeat
from typing import ClassVar

from scheduler_core._units import byte_to_gib
from scheduler_core.accounting import Allocatable
from scheduler_core.arguments import TpRule
from scheduler_core.caching import Columns, Rule, joined, none_positions
from scheduler_core.candidates import Candidate, Claim
from scheduler_core.cluster import balanced_groups, ram_not_enough
from scheduler_core.estimate import RamClaimRule
from scheduler_core.events import Action, Level, list_message
from scheduler_core.framework import Clears
from scheduler_core.memo import SlotKey
from scheduler_core.outcomes import CandidateRuns, FailureTally, RunsPart, StageOutcome, join_runs
from scheduler_core.reasons import MORE_CAPACITY, Reason
from scheduler_core.selection import Selection, effective_vram
from scheduler_core.strategies.stage import GpustackStage
from scheduler_core.workers import Gpu, WorkerView


@dataclass(frozen=True, slots=True)
class _Inputs:
    """Every decision input the per-worker rule reads (its signature)."""

    gpu_type: str | None
    vram_claim: int
    ram_claim: int
    fraction: float
    utilization: float | None
    diffusion: bool
    gpu_count: int | None
    tp_rule: TpRule
    ram_rule: RamClaimRule

    @property
    def effective_vram(self) -> float:
        return effective_vram(self.vram_claim, self.fraction, self.diffusion)


@dataclass(frozen=True, slots=True)
class _WorkerOutcome:
    """What the stage does for one worker: the groups it tracks for the message
    (total free, GPUs in group) and its candidate's claim and GPU indexes (None: failure),
    made once per worker shape (every worker of the shape shares them)."""

    tracked: tuple[tuple[int, int], ...]
    claim: Claim | None = None
    indexes: tuple[int, ...] = ()


def _group_eligible(inputs: _Inputs, group: list[tuple[Gpu, int]]) -> bool:
    if inputs.diffusion:
        return not any(free < inputs.effective_vram for _, free in group)
    return not any(free / gpu.total < inputs.fraction for gpu, free in group)


def _greedy_prefix(inputs: _Inputs, group: list[tuple[Gpu, int]]) -> dict[int, int] | None:
    """Walk the group by free VRAM (desc) until a TP-divisible prefix covers the claim."""
    claims: dict[int, int] = {}
    vram_sum = 0
    gpu_count = inputs.gpu_count
    for gpu, free in sorted(group, key=lambda slot: slot[1], reverse=True):
        assert gpu.index is not None  # grouping keeps indexed GPUs only
        claim = free if inputs.diffusion else int(gpu.total * inputs.fraction)
        claims[gpu.index] = claim
        vram_sum += claim
        if not inputs.tp_rule.divisible(len(claims)):
            continue
        if gpu_count and len(claims) >= gpu_count:
            return claims if vram_sum >= inputs.vram_claim else None
        if not gpu_count and vram_sum >= inputs.vram_claim:
            return claims
    return None


def _best_group(inputs: _Inputs, gpus: tuple[Gpu, ...], allocatable: Allocatable) -> _WorkerOutcome:
    """The stage's rule for one worker's GPUs."""
    if ram_not_enough(inputs.ram_claim, allocatable):
        return _WorkerOutcome(())
    slots = [
        (gpu, allocatable.vram.get(gpu.index, 0))
        for gpu in gpus
        if gpu.index is not None and gpu.total and allocatable.vram.get(gpu.index, 0) > 0
    ]
    tracked: list[tuple[int, int]] = []
    for group in balanced_groups(slots, lambda slot: slot[1]):
        if not _group_eligible(inputs, group) or len(group) < 2:
            continue
        total = sum(free for _, free in group)
        tracked.append((total, len(group)))
        if total < inputs.effective_vram:
            continue
        claims = _greedy_prefix(inputs, group)
        if claims is not None:
            claim = Claim(claims, inputs.ram_rule.ram_for(claims), inputs.utilization, inputs.vram_claim)
            return _WorkerOutcome(tuple(tracked), claim, tuple(claims))
    return _WorkerOutcome(tuple(tracked))


@dataclass(frozen=True, slots=True)
class _WorkerCandidate:
    """One worker's part of the stage: its candidate, and its largest tracked group.

    ``peak`` is what GPUStack's "largest group" bookkeeping takes from this worker
    when the group beats every earlier one: (free VRAM of the group, GPUs in it, the
    worker's GPUs), the first of its largest groups; ``peak_total`` its free VRAM
    (-1: the worker tracked no group). ``run`` is the candidate as the worker's run
    (empty: none), kept with it for the scorer (:class:`~scheduler_core.outcomes.CandidateRuns`).
    """

    candidate: Candidate | None
    peak: tuple[int, int, int] | None
    peak_total: int
    run: tuple[Candidate, ...] = ()


def _candidate(inputs: _Inputs, worker: WorkerView, outcome: _WorkerOutcome) -> _WorkerCandidate:
    peak: tuple[int, int, int] | None = None
    for total, satisfied in outcome.tracked:
        if peak is None or total > peak[0]:
            peak = (total, satisfied, len(worker.gpus))
    peak_total = -1 if peak is None else peak[0]
    if outcome.claim is None:
        return _WorkerCandidate(None, peak, peak_total)
    candidate = Candidate(worker, inputs.gpu_type, outcome.indexes, outcome.claim)
    return _WorkerCandidate(candidate, peak, peak_total, (candidate,))


_RULE = Rule("single_worker_multi_gpu", _best_group, _candidate, reads_reported=False)


#: The workers of a GPU type with two GPUs or more (the only ones the stage considers).
SEVERAL_GPUS = SlotKey("several_gpus")


class SingleWorkerMultiGpu(GpustackStage):
    """Auto placement on several GPUs of one worker; at most one candidate per worker."""

    name = "single_worker_multi_gpu"
    clears: ClassVar[Clears] = {
        Reason.INSUFFICIENT_VRAM: MORE_CAPACITY,
        Reason.TP_NOT_DIVISIBLE: MORE_CAPACITY,
    }

    def skip(self, selection: Selection) -> bool:
        """Manual selection runs only the manual stage."""
        return bool(selection.selected_workers)

    def __call__(self, selection: Selection) -> StageOutcome:
        """One candidate per worker that can hold the model on a balanced GPU group; a worker
        of two or more GPUs without one fails with the reason of GPUStack's text for it."""
        tally = FailureTally(self.name)
        slots: list[tuple[Candidate, ...]] = []
        keys: list[_Inputs] = []
        layout: list[Sequence[WorkerView]] = []
        parts: list[RunsPart[Candidate] | None] = []
        lineage: list[tuple[object, int]] = []
        for gpu_type, workers in selection.workers_by_type.items():
            inputs = _Inputs(
                gpu_type,
                selection.vram_claim,
                selection.ram_claim,
                selection.fraction(gpu_type),
                selection.mfs(gpu_type),
                selection.is_diffusion,
                selection.gpu_count,
                selection.tp_rule,
                selection.ram_rule,
            )
            several = selection.runner.subset(SEVERAL_GPUS.of(gpu_type), workers, _several_gpus)
            columns = selection.runner.columns(_RULE, inputs, gpu_type, several, _COLUMNS)
            runs = columns.lists[1]
            slots += runs
            keys.append(inputs)
            layout.append(several)
            parts.append(joined(columns, runs))
            lineage.append((columns.run, columns.version))
            _track_failures(selection, gpu_type, columns, _Failed(tally, columns.results))
        candidates = join_runs(slots, parts)
        if candidates:
            key = (self.name, tuple(keys))
            filed = CandidateRuns(candidates, tuple(slots), key, tuple(layout), tuple(lineage))
            selection.state.prepare(CandidateRuns, lambda: filed)
        return tally.outcome(candidates)


@dataclass(frozen=True, slots=True)
class _Failed:
    """Where the walk tallies a failing worker: the stage's tally and the run, in worker order."""

    tally: FailureTally
    ran: list[tuple[WorkerView, _WorkerCandidate]]

    def add(self, reason: Reason, positions: list[int]) -> None:
        """Tally the workers at ``positions`` of the run (left as positions: thousands may fail)."""
        self.tally.add_positions(reason, self.ran, positions)


_CANDIDATE = operator.attrgetter("candidate")
_RUN = operator.attrgetter("run")
_PEAK_TOTAL = operator.attrgetter("peak_total")
#: What the stage reads of each worker's part (kept with the run: :meth:`StageRunner.columns`).
_COLUMNS = (_CANDIDATE, _RUN, _PEAK_TOTAL)


def _several_gpus(worker: WorkerView) -> bool:
    return len(worker.gpus) >= 2


def _record_breakers(peaks: list[int], start: int, position: int = 0) -> list[int]:
    """Positions from ``position`` on whose value beats ``start`` and every value before it
    from ``position`` on (strictly), in order."""
    breakers: list[int] = []
    threshold = start
    while True:
        beats = map(operator.gt, islice(peaks, position, None), repeat(threshold))
        found = next(compress(count(position), beats), None)
        if found is None:
            return breakers
        breakers.append(found)
        threshold, position = peaks[found], found + 1


def _track_failures(selection: Selection, gpu_type: str | None, columns: Columns, failed: _Failed) -> None:
    """GPUStack's walk over the workers of one GPU type, without visiting each of them.

    Walking the workers in order, the tracker takes a worker's peak when it beats the
    tracker's VRAM (strictly), and a worker without a candidate records the failure
    message for the tracker's state, once per state. The state only changes at the
    workers whose peak beats every earlier one (:func:`_record_breakers`), so each
    stretch between two of them records one message if a worker in it failed. The record
    breakers and the failing positions are kept with the run (:meth:`Columns.derived`).

    Args:
        columns: the run's workers and parts, in worker order, and the columns of
            :data:`_COLUMNS` (each part's candidate, None for a failed worker; its peak).
        failed: tallies each failing worker under the reason of its stretch's text.
    """
    tracker = selection.log.multi_gpu
    ran = columns.results
    setters = _breakers(columns, tracker.vram)
    failing = none_positions(columns, 0)  # the workers without a candidate
    if not failing:  # no failure: only the tracker's last state matters
        if setters:  # the last record is the first of the largest peaks, as the walk keeps
            peak = ran[setters[-1]][1].peak
            assert peak is not None
            tracker.vram, tracker.satisfied, tracker.total_gpus = peak
        return
    recorded: tuple[int, int, int] | None = None
    reason = Reason.INSUFFICIENT_VRAM  # set by the first stretch with a failure, which records
    for setter, start, end in zip([None, *setters], [0, *setters], [*setters, len(ran)], strict=True):
        if setter is not None:
            peak = ran[setter][1].peak
            assert peak is not None  # it beat the tracker, so it tracked a group
            tracker.vram, tracker.satisfied, tracker.total_gpus = peak
        first = bisect_left(failing, start)
        if first < len(failing) and failing[first] < end:
            state = (tracker.vram, tracker.satisfied, tracker.total_gpus)
            if state != recorded:  # the failure text (and its reason) depends on the tracker only
                recorded = state
                reason = _record_failure(selection, gpu_type)
            last = bisect_left(failing, end, first)
            failed.add(reason, failing[first:last])


def _breakers(columns: Columns, start: int) -> list[int]:
    """:func:`_record_breakers` of the run's peaks over ``start``, kept with the run (per
    start) and patched in place (:func:`_patch_breakers`)."""
    peaks: list[int] = columns.lists[2]

    def build() -> list[int]:
        return _record_breakers(peaks, start)

    def patch(breakers: list[int], positions: list[int]) -> bool:
        _patch_breakers(breakers, peaks, start, positions)
        return True

    return columns.derived(("breakers", start), build, patch)


def _patch_breakers(breakers: list[int], peaks: list[int], start: int, positions: list[int]) -> None:
    """Bring ``breakers`` (the records of ``peaks`` over ``start``) up to date after the peaks
    at ``positions`` (ascending) were rewritten.

    The records are the prefix maxima's steps: a rewritten peak that was no record and does
    not beat the largest value before it (the record before it, or ``start``) changes none of
    them. At the first rewritten peak that was a record or now beats that value, the records
    from there on are found again (a scan from that position, not from the run's start); the
    later positions are within that scan.
    """
    for position in positions:
        at = bisect_left(breakers, position)
        threshold = peaks[breakers[at - 1]] if at else start
        was_record = at < len(breakers) and breakers[at] == position
        if was_record or peaks[position] > threshold:
            breakers[at:] = _record_breakers(peaks, threshold, position)
            return


def _record_failure(selection: Selection, gpu_type: str | None) -> Reason:
    """Record GPUStack's failure line for the tracker's state (the tp check first); its reason."""
    tracker = selection.log.multi_gpu
    tp_message = selection.tp_rule.problem(tracker.satisfied)
    if tp_message:
        lines = [tp_message]
        reason = Reason.TP_NOT_DIVISIBLE
    else:
        lines = [_capacity_message(selection, gpu_type)]
        reason = Reason.INSUFFICIENT_VRAM
    selection.log.events.add(Level.INFO, Action.AUTO_SINGLE_WORKER_MULTI_GPU, list_message(lines), reason)
    return reason


def _capacity_message(selection: Selection, gpu_type: str | None) -> str:
    tracker = selection.log.multi_gpu
    if selection.is_diffusion:
        needed = byte_to_gib(int(effective_vram(selection.vram_claim, selection.fraction(gpu_type), True)))
        return (
            f"SGLang Diffusion requires each GPU to provide {needed} GiB of allocatable VRAM "
            "when running in parallel."
        )
    message = f"The largest available worker has {byte_to_gib(tracker.vram):.2f} GiB allocatable VRAM."
    fraction = selection.fraction(gpu_type)
    if fraction != 0:
        effective: float = 0
        if tracker.total_gpus > 0:
            effective = byte_to_gib(int(tracker.vram * fraction * tracker.satisfied / tracker.total_gpus))
        message = (
            message.rstrip(".")
            + f", {tracker.satisfied}/{tracker.total_gpus} of GPUs meet the VRAM utilization"
            f" ratio, providing {effective} GiB of allocatable VRAM."
        )
    return message
