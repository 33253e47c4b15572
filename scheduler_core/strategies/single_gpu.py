"""Stage 2: one worker, one GPU (GPUStack ``find_single_worker_single_gpu_full_offloading``).

Every GPU that fits becomes a candidate; the scorer picks among them. A GPU
fits an LLM when ``claim ≤ total × fraction`` and its allocatable share is at
least the fraction; a diffusion model only needs ``claim ≤ total``.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler_core._units import byte_to_gib
from scheduler_core.cluster import WorkerView, ram_not_enough
from scheduler_core.events import Action, Level, list_message
from scheduler_core.strategies._base import Candidate, Selection


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
            for worker in workers_of_type:
                candidates.extend(_worker_candidates(selection, worker, gpu_type))
        return candidates


def _worker_candidates(selection: Selection, worker: WorkerView, gpu_type: str | None) -> list[Candidate]:
    allocatable = selection.cluster.allocatable(worker, gpu_type)
    if ram_not_enough(selection.ram_claim, allocatable) or not worker.gpus:
        return []
    fraction = selection.fraction(gpu_type)
    utilization = selection.mfs(gpu_type)
    diffusion = selection.is_diffusion
    largest_vram, largest_rate = 0, 0.0
    candidates: list[Candidate] = []
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
        vram = {gpu.index: amount}
        claim = selection.claim(vram, utilization)
        candidates.append(Candidate(worker, gpu.type, (gpu.index,), claim))
    if not candidates:
        message = f"The current available GPU only has {byte_to_gib(largest_vram)} GiB allocatable VRAM."
        if fraction != 0 and not diffusion:
            message = message.rstrip(".") + f" ({(largest_rate * 100):.2f}%)."
        selection.events.add(Level.INFO, Action.AUTO_SINGLE_GPU, list_message(message), "insufficient_vram")
    return candidates
