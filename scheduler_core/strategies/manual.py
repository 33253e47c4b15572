"""Stage 1: manual GPU selection (``base_candidate_selector.py: _find_manual_gpu_selection_candidates``).

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
from typing import ClassVar

from scheduler_core._units import byte_to_gib
from scheduler_core.candidates import Candidate, Subordinate
from scheduler_core.cluster import gpu_rate
from scheduler_core.events import Action, Level, list_message
from scheduler_core.framework import Clears
from scheduler_core.outcomes import FailureTally, StageOutcome
from scheduler_core.reasons import MORE_CAPACITY, ClusterChange, Reason
from scheduler_core.selection import Selection
from scheduler_core.strategies.stage import GpustackStage
from scheduler_core.wake import ANY_GPU, GpuFloor, WakeQuery
from scheduler_core.workers import Gpu, WorkerView

_HETEROGENEOUS = (
    "Deployment with heterogeneous GPU types is not supported, please select GPUs of the same "
    "type or update GPUs per replica."
)
_OVERCOMMIT = "Manual GPU selection resulted in resource overcommit."


@dataclass(frozen=True, slots=True)
class _Request:
    vram: int
    ram: int


class ManualGpuSelection(GpustackStage):
    """Placement on the GPUs the user selected."""

    name = "manual_gpu_selection"
    clears: ClassVar[Clears] = {
        Reason.INSUFFICIENT_VRAM: MORE_CAPACITY,
        Reason.OVERCOMMIT: MORE_CAPACITY,
        Reason.OVERCOMMIT_NOT_ALLOWED: MORE_CAPACITY,
        # the selection itself names GPUs of several types: only a new snapshot can change that
        Reason.HETEROGENEOUS_GPUS: frozenset({ClusterChange.SNAPSHOT}),
    }

    def wake_floor(self, query: WakeQuery) -> GpuFloor | None:
        """No floor for a manual selection (the stage overcommits rather than skip a GPU);
        None without one (the stage returns nothing)."""
        return ANY_GPU if query.manual else None

    def skip(self, selection: Selection) -> bool:
        """Never skipped; returns nothing without a manual selection."""
        return False

    def __call__(self, selection: Selection) -> StageOutcome:
        """Manual candidates after GPUStack's overcommit triage; the selected workers fail with
        the reason of GPUStack's text when the triage leaves none."""
        tally = FailureTally(self.name)
        if not selection.selected_workers:
            return tally.outcome(())
        workers = selection.ordered
        gpu_count = selection.gpu_count or 0
        types = list(selection.manual.by_type)
        total_selected = _selected_count(selection)
        if gpu_count == total_selected and len(types) > 1:
            selection.log.events.add(
                Level.ERROR, Action.MANUAL_MULTI, list_message(_HETEROGENEOUS), Reason.HETEROGENEOUS_GPUS
            )
            chosen = set(selection.selected_workers)
            tally.add_all(Reason.HETEROGENEOUS_GPUS, (w for w in workers if w.name in chosen))
            return tally.outcome(())
        request = _Request(
            vram=selection.vram_claim * (gpu_count if selection.is_diffusion else 1),
            ram=selection.ram_claim,
        )
        copies = {t: _selected_copies(selection, workers, t) for t in types}
        candidates = _candidates(selection, copies, request, gpu_count)
        kept = _triage(selection, workers, candidates, request, total_selected)
        if candidates and not kept and selection.model.replicas > 1:
            tally.add_all(Reason.OVERCOMMIT_NOT_ALLOWED, (c.worker for c in candidates))
        return tally.outcome(kept)


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
        indexes = _follower_indexes(selection, worker, gpu_type, utilization, request)[: gpu_count - placed]
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


def _follower_indexes(
    selection: Selection, worker: WorkerView, gpu_type: str, utilization: float, request: _Request
) -> list[int]:
    """A subordinate's GPUs in GPUStack's order (``_manual_select_multi_worker_multi_gpu_candidates``).

    ``worker`` is the selected copy, its GPUs already most-free first. Upstream then sorts them
    again, stably, by *claim* rate: each selected GPU's claim (``_get_worker_resource_claim``
    over the whole selected list) over its total (``sort_gpu_indexes_by_allocatable_rate``
    handed the claims). With equal totals every rate is the same and the most-free order
    stands; with cards of different sizes ``int(total × fraction) / total`` differs in its last
    bits and decides the order.
    """
    selected = selection.manual.by_type[gpu_type][worker.name]
    claims = selection.vram_claims(worker, selected, utilization, request.vram)

    def claim_rate(gpu: Gpu) -> float:
        if gpu.index is None or not gpu.total:
            return 0.0
        return claims.get(gpu.index, 0) / gpu.total

    ordered = sorted(worker.gpus, key=claim_rate, reverse=True)
    return [gpu.index for gpu in ordered if gpu.index is not None]  # the copy holds selected GPUs only


def _same_backend(instance_backend: str | None, model_backend: str | None) -> bool:
    """GPUStack compares the instance's model backend with the model's; a null one never matches
    (``base_candidate_selector.py: _validate_distributed_limit_per_worker``)."""
    if instance_backend is None or model_backend is None:
        return False
    return instance_backend.lower() == model_backend.lower()


def _hosts_distributed_instance(selection: Selection, worker: WorkerView) -> bool:
    """A worker runs one distributed SGLang instance at most (GPUStack's rule and text)."""
    for instance in selection.cluster.instances_on(worker.id):
        servers = instance.distributed_servers
        if not (servers and servers.subordinate_workers):
            continue
        if not _same_backend(instance.backend, selection.model.backend):
            continue
        selection.log.messages[:] = [
            f"- Each worker can run only one distributed vLLM instance. "
            f"Worker '{worker.name}' already has '{instance.name}'."
        ]
        return True
    return False


# ----------------------------------------------------------------------------- triage
# ``base_candidate_selector.py: _generate_manual_selected_gpus_overcommit_message`` and
# ``_get_non_overcommit_and_best_overcommit_candidates``.

#: More indexes than this are abbreviated in the "Using worker ... GPU indexes" line.
_SHOWN_INDEXES = 8


@dataclass(frozen=True, slots=True)
class _Selected:
    """The whole manual selection as found on the workers: allocatable bytes of the
    selected GPUs and which of them meet the fraction (``(type, worker, index)``)."""

    allocatable: int
    satisfied: frozenset[tuple[str, str, int]]


def _selected(selection: Selection, workers: Sequence[WorkerView], utilization: float) -> _Selected:
    by_name = {worker.name: worker for worker in workers}
    allocatable = 0
    satisfied: set[tuple[str, str, int]] = set()
    for gpu_type, per_worker in selection.manual.by_type.items():
        for name, indexes in per_worker.items():
            worker = by_name.get(name)
            if worker is None:
                continue
            free = selection.cluster.allocatable(worker, gpu_type).vram
            totals = {g.index: g.total for g in worker.gpus if g.type == gpu_type and g.total}
            for index in indexes:
                allocatable += free.get(index, 0)
                fits = index in free and index in totals and free[index] / totals[index] >= utilization
                if utilization == 0 or fits:
                    satisfied.add((gpu_type, name, index))
    return _Selected(allocatable, frozenset(satisfied))


@dataclass(frozen=True, slots=True)
class _Usage:
    """What a candidate uses: claims, allocatable bytes, GPUs and how many meet the fraction."""

    vram_claim: int
    ram_claim: int
    allocatable: int
    gpus: int
    satisfied: int


def _usage(selection: Selection, candidate: Candidate, selected: _Selected) -> _Usage:
    gpu_type = candidate.gpu_type or ""
    parts = [(candidate.worker, candidate.gpu_indexes, candidate.claim)]
    parts.extend((sub.worker, sub.gpu_indexes, sub.claim) for sub in candidate.subordinates)
    vram = ram = allocatable = gpus = satisfied = 0
    for worker, indexes, claim in parts:
        vram += sum(claim.vram.values())
        ram += claim.ram or 0
        free = selection.cluster.allocatable(worker, candidate.gpu_type).vram
        gpus += len(indexes)
        allocatable += sum(free.get(index, 0) for index in indexes)
        satisfied += sum((gpu_type, worker.name, index) in selected.satisfied for index in indexes)
    return _Usage(vram, ram, allocatable, gpus, satisfied)


def _is_overcommit(usage: _Usage, request: _Request) -> bool:
    short_of_ram = request.ram > 0 and usage.ram_claim < request.ram
    return usage.vram_claim < request.vram or short_of_ram or usage.satisfied < usage.gpus


@dataclass(frozen=True, slots=True)
class _Overcommit:
    """An overcommitted candidate's effective VRAM (what the pick compares) and its message."""

    effective_vram: float
    message: str


def _abbreviated_indexes(indexes: Sequence[int]) -> str:
    """``utils/gpu.py: abbreviate_gpu_indexes`` with GPUStack's limit of 8 here."""
    if len(indexes) <= _SHOWN_INDEXES:
        return str(list(indexes))
    shown = ",".join(str(index) for index in indexes[:_SHOWN_INDEXES])
    return f"[{shown}...(more {len(indexes) - _SHOWN_INDEXES})]"


def _used_devices(candidate: Candidate, usage: _Usage) -> str:
    """``utils/gpu.py: abbreviate_worker_gpu_indexes``."""
    text = f"worker {candidate.worker.name} GPU indexes {_abbreviated_indexes(candidate.gpu_indexes)}"
    other_gpus = usage.gpus - len(candidate.gpu_indexes)
    other_workers = len(candidate.subordinates)
    if other_gpus > 0 and other_workers > 0:
        text += f" and {other_gpus} {'GPUs' if other_gpus > 1 else 'GPU'}"
        text += f" from other {other_workers} {'workers' if other_workers > 1 else 'worker'}"
    return text


def _overcommit(
    candidate: Candidate, usage: _Usage, selected: _Selected, utilization: float, total_selected: int
) -> _Overcommit:
    partial = usage.gpus < total_selected
    lines = [_OVERCOMMIT]
    if partial:
        lines.append(f"Using {_used_devices(candidate, usage)} out of {total_selected} selected devices.")
    if utilization == 0:  # not an LLM: the claim is split, no fraction to meet
        effective: float = usage.allocatable if partial else selected.allocatable
        if partial:
            lines.append(f"Used GPUs provide {byte_to_gib(effective)} GiB allocatable VRAM.")
        else:
            lines.append(f"Selected GPUs have {byte_to_gib(effective)} GiB of VRAM.")
        return _Overcommit(effective, list_message(lines))
    if partial:
        effective = usage.allocatable * utilization
        lines.append(
            f"Used GPUs provide {byte_to_gib(usage.allocatable):.2f} GiB allocatable VRAM, "
            f"{usage.satisfied}/{usage.gpus} of GPUs meet the VRAM utilization ratio, "
            f"providing {byte_to_gib(effective):.2f} GiB of allocatable VRAM."
        )
    else:
        effective = selected.allocatable * utilization
        lines.append(
            f"Selected GPUs have {byte_to_gib(selected.allocatable):.2f} GiB allocatable VRAM, "
            f"{len(selected.satisfied)}/{total_selected} of GPUs meet the VRAM utilization ratio, "
            f"providing {byte_to_gib(effective):.2f} GiB of allocatable VRAM."
        )
    return _Overcommit(effective, list_message(lines))


def _triage(
    selection: Selection,
    workers: Sequence[WorkerView],
    candidates: list[Candidate],
    request: _Request,
    total_selected: int,
) -> list[Candidate]:
    """Fitting candidates; else, for one replica, the overcommitted one with the most
    effective VRAM (ties: the later one), with GPUStack's message."""
    if not candidates:
        return []
    fitting: list[Candidate] = []
    best: tuple[Candidate, _Overcommit] | None = None
    selected_by_type: dict[str | None, _Selected] = {}
    for candidate in candidates:
        utilization = _utilization(selection, candidate.gpu_type)
        selected = selected_by_type.get(candidate.gpu_type)
        if selected is None:
            selected = selected_by_type[candidate.gpu_type] = _selected(selection, workers, utilization)
        usage = _usage(selection, candidate, selected)
        if not _is_overcommit(usage, request):
            fitting.append(candidate)
        elif not fitting:
            report = _overcommit(candidate, usage, selected, utilization, total_selected)
            # upstream starts the best effective VRAM at 0: a negative one (a negative
            # computed fraction) never qualifies, and then nothing is deployed
            if report.effective_vram >= (best[1].effective_vram if best else 0):
                best = (candidate, report)
    if fitting:
        return fitting
    if selection.model.replicas > 1:
        selection.log.events.add(
            Level.INFO,
            Action.MANUAL_MULTI,
            list_message(
                f"Found {len(candidates)} candidate, manual scheduling for multi-replica model "
                "instances does not allow overcommit or heterogeneous deployment topologies."
            ),
            Reason.OVERCOMMIT_NOT_ALLOWED,
        )
        return []
    if best is None:  # no candidate offers any effective VRAM: nothing, and no message
        return []
    selection.log.events.add(Level.INFO, Action.MANUAL_MULTI, best[1].message, Reason.OVERCOMMIT)
    return [best[0]._replace(overcommit=True)]
