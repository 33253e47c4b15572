"""Stage 3: one worker, several GPUs (GPUStack ``find_single_worker_multi_gpu_full_offloading``).

Per worker, GPUs are partitioned into memory-balanced groups (0.9 rule); the
first group (smallest free memory first) whose GPUs all meet the fraction and
whose greedy, TP-divisible prefix covers the claim yields the worker's only
candidate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from scheduler_core._units import byte_to_gib
from scheduler_core.cluster import GpuSlot, WorkerView, group_gpus_by_memory
from scheduler_core.events import Action, Level, list_message
from scheduler_core.strategies._base import Candidate, Selection, worker_outcomes, worker_shape


class SingleWorkerMultiGpu:
    """Auto placement on several GPUs of one worker; at most one candidate per worker."""

    name = "single_worker_multi_gpu"

    def skip(self, selection: Selection) -> bool:
        """Manual selection runs only the manual stage."""
        return bool(selection.selected_workers)

    def __call__(self, selection: Selection, workers: Sequence[WorkerView]) -> list[Candidate]:
        """One candidate per worker that can hold the model on a balanced GPU group."""
        candidates: list[Candidate] = []
        tracker = selection.multi_gpu
        for gpu_type, workers_of_type in selection.workers_by_type(workers).items():
            several = (worker for worker in workers_of_type if len(worker.gpus) >= 2)
            outcomes = worker_outcomes(
                selection, self.name, gpu_type, several, partial(_outcome, selection, gpu_type)
            )
            for worker, outcome in outcomes:
                for total, satisfied in outcome.tracked:  # GPUStack's "largest group" bookkeeping
                    if total > tracker.vram:
                        tracker.vram, tracker.satisfied = total, satisfied
                        tracker.total_gpus = len(worker.gpus)
                if outcome.candidate is not None:
                    candidates.append(outcome.candidate)
                else:
                    _record_failure(selection, gpu_type)
        return candidates


def _group_eligible(selection: Selection, group: list[GpuSlot], gpu_type: str | None) -> bool:
    if selection.is_diffusion:
        needed = selection.effective_vram(gpu_type)
        return not any(slot.allocatable < needed for slot in group)
    fraction = selection.fraction(gpu_type)
    return not any(slot.allocatable / slot.gpu.total < fraction for slot in group)


def _greedy_prefix(selection: Selection, group: list[GpuSlot], gpu_type: str | None) -> dict[int, int] | None:
    """Walk the group by free VRAM (desc) until a TP-divisible prefix covers the claim."""
    fraction = selection.fraction(gpu_type)
    claims: dict[int, int] = {}
    vram_sum = 0
    gpu_count = selection.gpu_count
    for slot in sorted(group, key=lambda s: s.allocatable, reverse=True):
        index = slot.gpu.index
        assert index is not None  # grouping keeps indexed GPUs only
        claim = slot.allocatable if selection.is_diffusion else int(slot.gpu.total * fraction)
        claims[index] = claim
        vram_sum += claim
        if not selection.tp_divisible(len(claims)):
            continue
        if gpu_count and len(claims) >= gpu_count:
            return claims if vram_sum >= selection.vram_claim else None
        if not gpu_count and vram_sum >= selection.vram_claim:
            return claims
    return None


@dataclass(frozen=True, slots=True)
class _WorkerOutcome:
    """What the stage does for one worker: the groups it tracks for the message
    (total free, GPUs in group) and the claims of its candidate (None: failure)."""

    tracked: tuple[tuple[int, int], ...]
    claims: dict[int, int] | None


def _evaluate(selection: Selection, worker: WorkerView, gpu_type: str | None) -> _WorkerOutcome:
    """The stage's logic for one worker, without side effects."""
    tracked: list[tuple[int, int]] = []
    groups = group_gpus_by_memory([worker], selection.cluster, selection.ram_claim, gpu_type)
    for group in groups:
        if not _group_eligible(selection, group, gpu_type) or len(group) < 2:
            continue
        total = sum(slot.allocatable for slot in group)
        tracked.append((total, len(group)))
        if total < selection.effective_vram(gpu_type):
            continue
        claims = _greedy_prefix(selection, group, gpu_type)
        if claims is not None:
            return _WorkerOutcome(tuple(tracked), claims)
    return _WorkerOutcome(tuple(tracked), None)


@dataclass(frozen=True, slots=True)
class _WorkerCandidate:
    """One worker's part of the stage: the groups tracked for the message and its candidate."""

    tracked: tuple[tuple[int, int], ...]
    candidate: Candidate | None


def _outcome(selection: Selection, gpu_type: str | None, worker: WorkerView) -> _WorkerCandidate:
    """The worker's outcome, shared within the decision by workers of equal shape."""
    key = ("single_worker_multi_gpu", *worker_shape(selection, worker, gpu_type))
    shaped = selection.memo.get(key)
    if not isinstance(shaped, _WorkerOutcome):
        shaped = selection.memo[key] = _evaluate(selection, worker, gpu_type)
    candidate = None
    if shaped.claims is not None:
        claim = selection.claim(shaped.claims, selection.mfs(gpu_type))
        candidate = Candidate(worker, gpu_type, tuple(shaped.claims), claim)
    return _WorkerCandidate(shaped.tracked, candidate)


def _record_failure(selection: Selection, gpu_type: str | None) -> None:
    tracker = selection.multi_gpu
    tp_message = selection.tp_problem(tracker.satisfied)
    if tp_message:
        lines = [tp_message]
        reason = "tp_not_divisible"
    else:
        lines = [_capacity_message(selection, gpu_type)]
        reason = "insufficient_vram"
    selection.events.add(Level.INFO, Action.AUTO_SINGLE_WORKER_MULTI_GPU, list_message(lines), reason)


def _capacity_message(selection: Selection, gpu_type: str | None) -> str:
    tracker = selection.multi_gpu
    if selection.is_diffusion:
        needed = byte_to_gib(int(selection.effective_vram(gpu_type)))
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
