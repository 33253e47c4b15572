"""Candidate scoring (GPUStack ``policies/scorers/placement_scorer.py``) and the pick.

Scores are in 0–100 (``GPUSTACK_SCHEDULER_SCALE_UP_PLACEMENT_MAX_SCORE``).
*binpack* prefers candidates whose claims fill the most of what is free;
*spread* prefers workers and GPUs running fewer instances. The pick is the
first candidate with the highest score (strict ``>``), GPUStack's tie rule.
GPUStack's model-file locality scorer (max 5) needs ModelFile rows the
request does not carry, so it contributes nothing here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduler_core._schemas import ModelInstance
from scheduler_core.cluster import Allocatable, ClusterState
from scheduler_core.strategies._base import Candidate, Claim

#: GPUStack's scale-up placement max score.
MAX_SCORE = 100.0
#: Binpack resource weights (``ResourceWeight(vram=2, ram=1)``).
_VRAM_WEIGHT, _RAM_WEIGHT = 2, 1
#: Binpack weights of the leader vs each subordinate worker.
_LEADER_WEIGHT, _SUBORDINATE_WEIGHT = 5, 1


def _ratio(claimed: float | None, free: float | None) -> float:
    if claimed and free and claimed > 0 and free > 0:
        return claimed / free * MAX_SCORE
    return 0.0


def _binpack_node(claim: Claim, indexes: Sequence[int], allocatable: Allocatable) -> float:
    ram = _ratio(claim.ram, allocatable.ram)
    if not indexes:
        return ram
    return max(
        (_RAM_WEIGHT * ram + _VRAM_WEIGHT * _ratio(claim.vram.get(i), allocatable.vram.get(i)))
        / (_RAM_WEIGHT + _VRAM_WEIGHT)
        for i in indexes
    )


def binpack_score(candidate: Candidate, cluster: ClusterState) -> float:
    """How tightly the candidate fills its GPUs; leader weighs 5, each follower 1."""
    leader = _binpack_node(
        candidate.claim,
        candidate.gpu_indexes,
        cluster.allocatable(candidate.worker, candidate.gpu_type),
    )
    if not candidate.subordinates:
        return leader
    followers = sum(
        _binpack_node(sub.claim, sub.gpu_indexes, cluster.allocatable(sub.worker, candidate.gpu_type))
        for sub in candidate.subordinates
    )
    n = len(candidate.subordinates)
    # GPUStack multiplies the *sum* by n (so several tight followers can exceed 100).
    return (_LEADER_WEIGHT * leader + followers * n * _SUBORDINATE_WEIGHT) / (
        _LEADER_WEIGHT + _SUBORDINATE_WEIGHT * n
    )


@dataclass(frozen=True, slots=True)
class _Load:
    """Instance counts per worker and per (worker, GPU index); this model vs others.

    Keyed by index only, as GPUStack counts them (an instance without a GPU type
    still loads its GPUs).
    """

    worker_current: Mapping[int, int]
    worker_other: Mapping[int, int]
    gpu_current: Mapping[tuple[int, int], int]
    gpu_other: Mapping[tuple[int, int], int]


def _placements(instance: ModelInstance) -> Iterable[tuple[int, list[int]]]:
    if instance.worker_id is not None:
        yield instance.worker_id, list(instance.gpu_indexes or ())
    servers = instance.distributed_servers
    for sub in (servers.subordinate_workers or ()) if servers else ():
        if sub.worker_id is not None:
            yield sub.worker_id, list(sub.gpu_indexes or ())


def _load(instances: Iterable[ModelInstance], model_id: int | None) -> _Load:
    counts: dict[bool, tuple[dict[int, int], dict[tuple[int, int], int]]] = {
        True: (defaultdict(int), defaultdict(int)),
        False: (defaultdict(int), defaultdict(int)),
    }
    for instance in instances:
        same = model_id is not None and instance.model_id == model_id
        per_worker, per_gpu = counts[same]
        for worker_id, indexes in _placements(instance):
            per_worker[worker_id] += len(indexes) or 1  # a CPU instance counts once
            for index in indexes:
                per_gpu[(worker_id, index)] += 1
    return _Load(counts[True][0], counts[False][0], counts[True][1], counts[False][1])


def _inverse(value: float, low: float, high: float) -> float:
    return 1.0 if high <= low else 1.0 - (value - low) / (high - low)


@dataclass(frozen=True, slots=True)
class _Ranges:
    """Min/max instance counts over the candidates' workers (the spread normalisation)."""

    current: tuple[int, int]
    other: tuple[int, int]
    any_worker_without_model: bool


def _ranges(load: _Load, workers: Sequence[int]) -> _Ranges:
    currents = [load.worker_current.get(w, 0) for w in workers]
    others = [load.worker_other.get(w, 0) for w in workers]
    return _Ranges((min(currents), max(currents)), (min(others), max(others)), 0 in currents)


def _worker_score(current: int, other: int, ranges: _Ranges) -> float:
    """The worker term from the worker's instance counts (this model, others)."""
    other_inv = _inverse(other, *ranges.other)
    current_inv = _inverse(current, *ranges.current)
    if ranges.any_worker_without_model:
        if current == 0:
            return 0.85 + 0.15 * other_inv
        return 0.45 + 0.35 * current_inv + 0.20 * other_inv
    return 0.50 + 0.25 * current_inv + 0.15 * other_inv


def _gpu_score(candidate: Candidate, load: _Load) -> float:
    if len(candidate.gpu_indexes) == 1:  # the common single-GPU case, without the list
        key = (candidate.worker.id, candidate.gpu_indexes[0])
        return 1.0 / (1 + load.gpu_current.get(key, 0) + 0.2 * load.gpu_other.get(key, 0))
    scores = [
        1.0
        / (
            1
            + load.gpu_current.get((candidate.worker.id, i), 0)
            + 0.2 * load.gpu_other.get((candidate.worker.id, i), 0)
        )
        for i in candidate.gpu_indexes
    ]
    return sum(scores) / len(scores)


#: The GPU term of a candidate whose GPUs run no instance: 1 / (1 + 0 + 0.2 × 0) for
#: each GPU, and the mean of n such terms is exactly 1.0 as well.
_IDLE_GPU_SCORE = 1.0


def spread_scores(
    candidates: Sequence[Candidate], instances: Iterable[ModelInstance], model_id: int | None
) -> list[float]:
    """Spread scores: fewer instances on the worker and on its GPUs score higher.

    The worker term depends only on the worker's two instance counts and the
    GPU term is exactly 1.0 on a worker whose GPUs run nothing, so both are
    computed once per distinct value rather than per candidate (same floats).
    """
    if not candidates:
        return []
    load = _load(instances, model_id)
    ranges = _ranges(load, list(dict.fromkeys(c.worker.id for c in candidates)))
    busy_gpus = {worker_id for worker_id, _ in load.gpu_current} | {w for w, _ in load.gpu_other}
    by_counts: dict[tuple[int, int], float] = {}
    scores: list[float] = []
    append = scores.append
    last_id: int | None = None
    worker = idle = 0.0
    busy = False
    for candidate in candidates:  # a worker's candidates come one after another
        worker_id = candidate.worker.id
        if worker_id != last_id:
            last_id = worker_id
            counts = (load.worker_current.get(worker_id, 0), load.worker_other.get(worker_id, 0))
            worker = by_counts.get(counts, -1.0)
            if worker < 0:
                worker = by_counts[counts] = _worker_score(*counts, ranges) * MAX_SCORE
            busy = worker_id in busy_gpus
            idle = 0.85 * worker + 0.15 * _IDLE_GPU_SCORE * MAX_SCORE
        if not candidate.gpu_indexes:
            append(worker)
        elif busy:
            append(0.85 * worker + 0.15 * _gpu_score(candidate, load) * MAX_SCORE)
        else:
            append(idle)
    return scores


def score_candidates(
    candidates: Sequence[Candidate], strategy: str, cluster: ClusterState, model_id: int | None
) -> list[float]:
    """The placement score of each candidate, in candidate order."""
    if strategy == "binpack":
        return [binpack_score(c, cluster) for c in candidates]
    return spread_scores(candidates, cluster.instances, model_id)


def pick_highest(scores: Sequence[float]) -> int | None:
    """Index of the first highest score (GPUStack: strict ``>``), None when there is none."""
    if not scores:
        return None
    # max() keeps the first of equal maxima, which is GPUStack's strict ">" walk.
    return max(range(len(scores)), key=scores.__getitem__)
