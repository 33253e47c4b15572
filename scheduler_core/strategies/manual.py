"""Stage 1: manual GPU selection (GPUStack ``_find_manual_gpu_selection_candidates``).

The user names GPUs as ``<worker>:<type>:<index>``. One GPU per replica makes
every selected GPU a candidate; more makes one candidate per worker holding
enough selected GPUs, or else one distributed candidate per type led by the
worker with the most selected GPUs. Candidates that do not cover the request
are *overcommitted*: when nothing else is left, GPUStack still deploys the
best of them (single-replica models only) and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from scheduler_core._units import byte_to_gib
from scheduler_core.cluster import WorkerView, sort_gpu_indexes_by_allocatable_rate
from scheduler_core.events import Action, Level, list_message
from scheduler_core.strategies._base import Candidate, Selection, Subordinate, gpu_rate

_HETEROGENEOUS = (
    "Deployment with heterogeneous GPU types is not supported, please select GPUs of the same "
    "type or update GPUs per replica."
)
_OVERCOMMIT = "Manual GPU selection resulted in resource overcommit."


@dataclass(frozen=True, slots=True)
class _Request:
    vram: int
    ram: int


class ManualGpuSelection:
    """Placement on the GPUs the user selected."""

    name = "manual_gpu_selection"

    def skip(self, selection: Selection) -> bool:
        """Never skipped; returns nothing without a manual selection."""
        return False

    def __call__(self, selection: Selection, workers: Sequence[WorkerView]) -> list[Candidate]:
        """Manual candidates after GPUStack's overcommit triage."""
        if not selection.selected_workers:
            return []
        gpu_count = selection.gpu_count or 0
        types = list(selection.manual.by_type)
        total_selected = _selected_count(selection)
        if gpu_count == total_selected and len(types) > 1:
            selection.events.add(
                Level.ERROR, Action.MANUAL_MULTI, list_message(_HETEROGENEOUS), "heterogeneous_gpus"
            )
            return []
        request = _Request(
            vram=selection.vram_claim * (gpu_count if selection.is_diffusion else 1),
            ram=selection.ram_claim,
        )
        copies = {t: _selected_copies(selection, workers, t) for t in types}
        candidates = _candidates(selection, copies, request, gpu_count)
        return _triage(selection, candidates, request, total_selected)


def _selected_count(selection: Selection) -> int:
    return sum(len(ix) for per_type in selection.manual.by_type.values() for ix in per_type.values())


def _selected_copies(selection: Selection, workers: Sequence[WorkerView], gpu_type: str) -> list[WorkerView]:
    """Copies of the selected workers holding only their selected GPUs of this type,
    most-free GPU first; workers with more selected GPUs first (stable)."""
    selected = selection.manual.by_type[gpu_type]
    copies: list[WorkerView] = []
    for worker in workers:
        indexes = selected.get(worker.name)
        if not indexes:
            continue
        allocatable = selection.cluster.allocatable(worker, gpu_type)
        gpus = [g for g in worker.gpus if g.type == gpu_type and g.index in indexes]
        gpus.sort(key=lambda g: gpu_rate(allocatable.vram, g), reverse=True)
        if gpus:  # a selection naming only GPUs the worker does not have adds nothing
            copies.append(worker.with_gpus(gpus))
    copies.sort(key=lambda w: len(w.gpus), reverse=True)
    return copies


def _candidates(
    selection: Selection,
    copies: dict[str, list[WorkerView]],
    request: _Request,
    gpu_count: int,
) -> list[Candidate]:
    candidates: list[Candidate] = []
    if gpu_count == 1:
        for gpu_type, workers in copies.items():
            for worker in workers:
                for gpu in worker.gpus:
                    assert gpu.index is not None
                    candidates.extend(_single_worker(selection, worker, gpu_type, [gpu.index], 1, request))
        return candidates
    for gpu_type, workers in copies.items():
        for worker in workers:
            indexes = [g.index for g in worker.gpus if g.index is not None]
            candidates.extend(_single_worker(selection, worker, gpu_type, indexes, gpu_count, request))
    if candidates:
        return candidates
    for gpu_type, workers in copies.items():
        candidates.extend(_multi_worker(selection, workers, gpu_type, gpu_count, request))
    return candidates


def _utilization(selection: Selection, gpu_type: str | None) -> float:
    value = selection.mfs_by_type.get(gpu_type, selection.mfs_by_type.get("*", 0.0))
    return value or 0.0


def _single_worker(
    selection: Selection,
    worker: WorkerView,
    gpu_type: str,
    indexes: list[int],
    gpu_count: int,
    request: _Request,
) -> list[Candidate]:
    """One candidate on the ``gpu_count`` most-free selected GPUs of the worker."""
    if len(indexes) < gpu_count:
        return []
    chosen = indexes[:gpu_count]  # sorted most-free first: satisfied GPUs lead
    utilization = _utilization(selection, gpu_type)
    vram = selection.vram_claims(worker, chosen, utilization, request.vram)
    claim = selection.claim(vram, utilization, request.ram)
    return [Candidate(worker, gpu_type, tuple(chosen), claim)]


def _multi_worker(
    selection: Selection,
    workers: list[WorkerView],
    gpu_type: str,
    gpu_count: int,
    request: _Request,
) -> list[Candidate]:
    """A distributed candidate: the first copy leads with all its selected GPUs."""
    if len(workers) < 2:
        return []
    utilization = _utilization(selection, gpu_type)
    leader = workers[0]
    leader_indexes = sorted(g.index for g in leader.gpus if g.index is not None)
    leader_vram = selection.vram_claims(leader, leader_indexes, utilization, request.vram)
    subordinates: list[Subordinate] = []
    placed = len(leader_indexes)
    for worker in workers[1:]:
        if placed >= gpu_count:
            break
        if _hosts_distributed_instance(selection, worker):
            continue
        indexes = _follower_indexes(selection, worker, gpu_type)[: gpu_count - placed]
        if not indexes:
            continue
        vram = selection.vram_claims(worker, indexes, utilization, request.vram)
        claim = selection.claim(vram, utilization, request.ram)
        subordinates.append(Subordinate(worker, gpu_type, tuple(indexes), claim))
        placed += len(indexes)
    if not subordinates:
        return []
    leader_claim = replace(selection.claim(leader_vram, None, request.ram), vram_utilization=None)
    return [
        Candidate(leader, gpu_type, tuple(leader_indexes), leader_claim, subordinates=tuple(subordinates))
    ]


def _follower_indexes(selection: Selection, worker: WorkerView, gpu_type: str) -> list[int]:
    selected = selection.manual.by_type[gpu_type][worker.name]
    allocatable = selection.cluster.allocatable(worker, gpu_type)
    ordered = sort_gpu_indexes_by_allocatable_rate(worker, allocatable.vram, gpu_type)
    return [index for index in ordered if index in selected]  # the copy holds existing GPUs only


def _hosts_distributed_instance(selection: Selection, worker: WorkerView) -> bool:
    """A worker runs one distributed SGLang instance at most (GPUStack's rule and text)."""
    for instance in selection.cluster.instances_on(worker.id):
        servers = instance.distributed_servers
        if not (servers and servers.subordinate_workers):
            continue
        if instance.backend is not None and instance.backend.lower() != "sglang":
            continue
        selection.messages[:] = [
            f"- Each worker can run only one distributed vLLM instance. "
            f"Worker '{worker.name}' already has '{instance.name}'."
        ]
        return True
    return False


# ----------------------------------------------------------------------------- triage


@dataclass(frozen=True, slots=True)
class _Usage:
    """What a candidate's GPUs offer: allocatable bytes, satisfied count, GPU count."""

    allocatable: int
    satisfied: int
    gpus: int


def _usage(selection: Selection, candidate: Candidate) -> _Usage:
    utilization = _utilization(selection, candidate.gpu_type)
    allocatable = satisfied = gpus = 0
    parts = [(candidate.worker, candidate.gpu_indexes)]
    parts.extend((sub.worker, sub.gpu_indexes) for sub in candidate.subordinates)
    for worker, indexes in parts:
        free = selection.cluster.allocatable(worker, candidate.gpu_type).vram
        for gpu in worker.gpus:
            if gpu.index in indexes:
                gpus += 1
                allocatable += free.get(gpu.index, 0)
                satisfied += utilization <= 0 or gpu_rate(free, gpu) >= utilization
    return _Usage(allocatable, satisfied, gpus)


def _is_overcommit(selection: Selection, candidate: Candidate, request: _Request) -> bool:
    claims = [candidate.claim, *(sub.claim for sub in candidate.subordinates)]
    if sum(sum(c.vram.values()) for c in claims) < request.vram:
        return True
    if request.ram > 0 and sum(c.ram or 0 for c in claims) < request.ram:
        return True
    usage = _usage(selection, candidate)
    return usage.satisfied < usage.gpus


def _effective_vram(selection: Selection, candidate: Candidate) -> float:
    utilization = _utilization(selection, candidate.gpu_type)
    allocatable = _usage(selection, candidate).allocatable
    return allocatable * utilization if utilization > 0 else allocatable


def _triage(
    selection: Selection, candidates: list[Candidate], request: _Request, total_selected: int
) -> list[Candidate]:
    if not candidates:
        return []
    fitting = [c for c in candidates if not _is_overcommit(selection, c, request)]
    if fitting:
        return fitting
    if selection.model.replicas > 1:
        selection.events.add(
            Level.INFO,
            Action.MANUAL_MULTI,
            list_message(
                f"Found {len(candidates)} candidate, manual scheduling for multi-replica model "
                "instances does not allow overcommit or heterogeneous deployment topologies."
            ),
            "overcommit_not_allowed",
        )
        return []
    best = candidates[0]
    for candidate in candidates[1:]:
        if _effective_vram(selection, candidate) >= _effective_vram(selection, best):
            best = candidate  # ties go to the later candidate, as upstream
    _record_overcommit(selection, best, total_selected)
    return [replace(best, overcommit=True)]


def _record_overcommit(selection: Selection, candidate: Candidate, total_selected: int) -> None:
    usage = _usage(selection, candidate)
    utilization = _utilization(selection, candidate.gpu_type)
    provided = byte_to_gib(usage.allocatable)
    lines = [_OVERCOMMIT]
    partial = usage.gpus != total_selected
    if partial:
        lines.append(
            f"Using worker {candidate.worker.name} GPU indexes {list(candidate.gpu_indexes)} "
            f"out of {total_selected} selected devices."
        )
    subject = "Used GPUs provide" if partial else "Selected GPUs have"
    if utilization > 0:
        effective = byte_to_gib(int(usage.allocatable * utilization))
        lines.append(
            f"{subject} {provided} GiB allocatable VRAM, {usage.satisfied}/{usage.gpus} of GPUs"
            f" meet the VRAM utilization ratio, providing {effective} GiB of allocatable VRAM."
        )
    elif partial:
        lines.append(f"{subject} {provided} GiB allocatable VRAM.")
    else:
        lines.append(f"{subject} {provided} GiB of VRAM.")
    selection.events.add(Level.INFO, Action.MANUAL_MULTI, list_message(lines), "overcommit")
