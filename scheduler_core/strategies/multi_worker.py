"""Stage 4: several workers (``sglang_resource_fit_selector.py: find_multi_worker_multi_gpu_candidates``).

A cross-worker memory-balanced GPU group acts as a gate: when some group has
every GPU above the fraction and the same GPU count on each of its workers
(no tensor-parallel check here: upstream checks tp per whole-node bucket),
GPUStack runs ``auto_select_multi_worker_multi_gpu_candidates`` over *all*
workers of the type, taking whole nodes with equal GPU counts in order until
their claims cover the model. That selection does not depend on the group,
so it is computed once per GPU type here (same result, same events).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from scheduler_core._units import byte_to_gib
from scheduler_core.candidates import Candidate, Claim, Subordinate
from scheduler_core.cluster import (
    GpuSlot,
    gpu_rate,
    group_gpus_by_memory,
    ram_not_enough,
    sort_workers_by_gpu_count,
)
from scheduler_core.events import Action, Level, list_message
from scheduler_core.framework import Clears
from scheduler_core.outcomes import FailureTally, StageOutcome
from scheduler_core.reasons import MORE_CAPACITY, Reason
from scheduler_core.selection import Selection
from scheduler_core.strategies.stage import GpustackStage
from scheduler_core.workers import WorkerView

_NO_COMBINATION = (
    "Cannot find a suitable worker combination to run the model in distributed mode. "
    "If you are confident that the resources are sufficient, you may manually schedule the "
    "model by selecting the workers and GPUs."
)


class MultiWorkerMultiGpu(GpustackStage):
    """Distributed placement over whole nodes with equal GPU counts."""

    name = "multi_worker_multi_gpu"
    clears: ClassVar[Clears] = {Reason.NO_WORKER_COMBINATION: MORE_CAPACITY}

    def skip(self, selection: Selection) -> bool:
        """Skipped under manual selection, without distributed inference, for diffusion."""
        return bool(selection.selected_workers) or not selection.distributed or (selection.is_diffusion)

    def __call__(self, selection: Selection) -> StageOutcome:
        """At most one distributed candidate per GPU type; when a type's workers combine into
        none, each of them fails with ``no_worker_combination``."""
        tally = FailureTally(self.name)
        candidates: list[Candidate] = []
        for gpu_type, workers_of_type in selection.workers_by_type.items():
            groups = group_gpus_by_memory(workers_of_type, selection.cluster, selection.ram_claim, gpu_type)
            if any(_gate_passes(selection, group, gpu_type) for group in groups):
                found = _auto_select(selection, workers_of_type, gpu_type)
                if not found and len(workers_of_type) >= 2:
                    tally.add_all(Reason.NO_WORKER_COMBINATION, workers_of_type)
                candidates.extend(found)
        return tally.outcome(candidates)


def _gate_passes(selection: Selection, group: list[GpuSlot], gpu_type: str | None) -> bool:
    if len(group) <= 1:
        return False
    fraction = selection.fraction(gpu_type)
    if not selection.is_diffusion and any(slot.allocatable / slot.gpu.total < fraction for slot in group):
        return False
    per_worker: dict[int, int] = {}
    for slot in group:
        per_worker[slot.worker.id] = per_worker.get(slot.worker.id, 0) + 1
    # Same GPU count on every worker of the group; tp is checked per whole-node bucket later.
    return len(set(per_worker.values())) == 1


def _whole_node_fits(selection: Selection, worker: WorkerView, gpu_type: str | None) -> bool:
    allocatable = selection.cluster.allocatable(worker, gpu_type)
    if ram_not_enough(selection.ram_claim, allocatable):
        return False  # extended-KV RAM is needed on every node
    if selection.is_diffusion:
        return True
    fraction = selection.fraction(gpu_type)
    # a GPU reporting no memory is skipped (GPUStack divides by its total and crashes)
    return not any(gpu.total and gpu_rate(allocatable.vram, gpu) < fraction for gpu in worker.gpus)


def _node_vram(selection: Selection, worker: WorkerView, gpu_type: str | None) -> int:
    if selection.is_diffusion:
        allocatable = selection.cluster.allocatable(worker, gpu_type)
        return sum(allocatable.vram.get(g.index, 0) for g in worker.gpus if g.index is not None)
    fraction = selection.fraction(gpu_type)
    return sum(int(gpu.total * fraction) for gpu in worker.gpus)


def _auto_select(
    selection: Selection, workers: Sequence[WorkerView], gpu_type: str | None
) -> list[Candidate]:
    if len(workers) < 2:
        return []
    buckets: dict[int, list[WorkerView]] = {}
    for worker in sort_workers_by_gpu_count(workers):
        if worker.gpus:
            buckets.setdefault(len(worker.gpus), []).append(worker)
    best: tuple[list[WorkerView], int, int, int] = ([], 0, 0, 0)
    for gpu_count, bucket in buckets.items():
        if len(bucket) < 2:
            continue
        chosen: list[WorkerView] = []
        vram_sum = 0
        for worker in bucket:
            if not _whole_node_fits(selection, worker, gpu_type):
                continue
            chosen.append(worker)
            vram_sum += _node_vram(selection, worker, gpu_type)
            if selection.tp_rule.divisible(gpu_count) and vram_sum >= selection.vram_claim:
                return [_distributed_candidate(selection, chosen, selection.mfs(gpu_type))]
        if vram_sum > best[1]:
            best = (chosen, vram_sum, len(bucket), gpu_count)
    _record_failure(selection, *best)
    return []


def _record_failure(
    selection: Selection, combination: list[WorkerView], vram: int, bucket_size: int, gpus: int
) -> None:
    lines: list[str] = []
    if combination:
        names = [worker.name for worker in combination]
        shown = (
            str(names) if len(names) <= 3 else (str(names[:3]).rstrip("]") + f"...(more {len(names) - 3})]")
        )
        message = f"The optimal combination {shown} provides {byte_to_gib(vram)} GiB of allocatable VRAM."
        skipped = bucket_size - len(combination)
        if skipped > 0:
            message += (
                f" There are {skipped} {'workers' if skipped > 1 else 'worker'} that can provide"
                f" {gpus} {'GPUs' if gpus > 1 else 'GPU'}, as the workers in the combination,"
                " but some GPUs among them fail to meet requirements."
            )
        lines.append(message)
    lines.append(_NO_COMBINATION)
    selection.log.events.add(
        Level.INFO, Action.AUTO_MULTI_WORKER_MULTI_GPU, list_message(lines), Reason.NO_WORKER_COMBINATION
    )


def _node_claim(worker: WorkerView, fraction: float) -> dict[int, int]:
    return {g.index: int(g.total * fraction) for g in worker.gpus if g.index is not None}


def _distributed_candidate(
    selection: Selection, workers: list[WorkerView], fraction: float | None
) -> Candidate:
    """GPUStack's ``_create_candidate``: the first worker leads with all its GPUs.

    The leader's claim carries no ``vram_utilization``; each follower's does.
    """
    leader = workers[0]
    share = fraction or 0.0
    gpu_type = leader.gpus[-1].type if leader.gpus else None
    subordinates = tuple(
        Subordinate(
            worker=worker,
            gpu_type=gpu_type,
            gpu_indexes=tuple(_node_claim(worker, share)),
            claim=selection.claim(_node_claim(worker, share), fraction),
        )
        for worker in workers[1:]
    )
    leader_vram = _node_claim(leader, share)
    leader_claim = Claim(
        vram=leader_vram,
        ram=selection.claim(leader_vram, None).ram,
        vram_utilization=None,
        estimated_vram=selection.vram_claim,
    )
    return Candidate(
        worker=leader,
        gpu_type=gpu_type,
        gpu_indexes=tuple(leader_vram),
        claim=leader_claim,
        subordinates=subordinates,
    )
