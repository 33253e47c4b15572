"""Stage 2: one worker, one GPU (GPUStack ``find_single_worker_single_gpu_full_offloading``).

Every GPU that fits becomes a candidate; the scorer picks among them. A GPU
fits an LLM when ``claim ≤ total × fraction`` and its allocatable share is at
least the fraction; a diffusion model only needs ``claim ≤ total``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from scheduler_core._units import byte_to_gib
from scheduler_core.cluster import WorkerView, ram_not_enough
from scheduler_core.events import Action, Level, list_message
from scheduler_core.strategies._base import Candidate, Claim, Selection, worker_outcomes, worker_shape


class SingleWorkerSingleGpu:
    """Auto placement on a single GPU; skipped when more than one GPU is required."""

    name = "single_worker_single_gpu"

    def skip(self, selection: Selection) -> bool:
        """Manual selection runs only the manual stage."""
        return bool(selection.selected_workers)

    def __call__(self, selection: Selection, workers: Sequence[WorkerView]) -> list[Candidate]:
        """All fitting single-GPU candidates, by GPU type, worker and GPU order."""
        if selection.gpu_count is not None and selection.gpu_count > 1:
            return []
        candidates: list[Candidate] = []
        for gpu_type, workers_of_type in selection.workers_by_type(workers).items():
            outcomes = worker_outcomes(
                selection, self.name, gpu_type, workers_of_type, partial(_outcome, selection, gpu_type)
            )
            for _, outcome in outcomes:
                if outcome.message is not None:
                    selection.events.add(
                        Level.INFO, Action.AUTO_SINGLE_GPU, outcome.message, "insufficient_vram"
                    )
                candidates.extend(outcome.candidates)
        return candidates


@dataclass(frozen=True, slots=True)
class _WorkerOutcome:
    """The stage's verdict for one worker shape: fitting GPUs with their (shared)
    claims, or the failure message."""

    fits: tuple[tuple[int, str | None, Claim], ...]
    message: str | None


def _evaluate(selection: Selection, worker: WorkerView, gpu_type: str | None) -> _WorkerOutcome:
    """The stage's logic for one worker, without side effects."""
    allocatable = selection.cluster.allocatable(worker, gpu_type)
    if ram_not_enough(selection.ram_claim, allocatable) or not worker.gpus:
        return _WorkerOutcome((), None)
    fraction = selection.fraction(gpu_type)
    utilization = selection.mfs(gpu_type)
    diffusion = selection.is_diffusion
    largest_vram, largest_rate = 0, 0.0
    fits: list[tuple[int, str | None, Claim]] = []
    for gpu in worker.gpus:
        if not gpu.total or gpu.index is None:
            continue
        free = allocatable.vram.get(gpu.index, 0)
        rate = free / gpu.total
        if free > largest_vram:
            largest_vram, largest_rate = free, rate
        if selection.vram_claim > gpu.total * (1 if diffusion else fraction):
            continue
        if not diffusion and rate < fraction:
            continue
        # _get_worker_resource_claim for one GPU: total × fraction, or the whole estimate.
        amount = selection.vram_claim if diffusion else int(gpu.total * fraction)
        fits.append((gpu.index, gpu.type, selection.claim({gpu.index: amount}, utilization)))
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


def _outcome(selection: Selection, gpu_type: str | None, worker: WorkerView) -> _WorkerCandidates:
    """The worker's outcome, shared within the decision by workers of equal shape."""
    key = ("single_worker_single_gpu", *worker_shape(selection, worker, gpu_type))
    shaped = selection.memo.get(key)
    if not isinstance(shaped, _WorkerOutcome):
        shaped = selection.memo[key] = _evaluate(selection, worker, gpu_type)
    candidates = tuple(
        Candidate(worker, gpu_type_, (index,), claim) for index, gpu_type_, claim in shaped.fits
    )
    return _WorkerCandidates(candidates, shaped.message)
