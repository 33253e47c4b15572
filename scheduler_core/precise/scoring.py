"""The precise scorer: pack tightly, keep idle nodes whole, break ties deterministically.

A candidate scores (0–100)::

    70 × Σ need / Σ free              over its GPUs (best fit: the GPU set it fills most)
  + 30 × (1 − share of its nodes it breaks)

``need`` is what the placement cannot do without on a GPU (SGLang's context, the rank's
weights and the KV floor at its fraction: the claim's ``estimated_vram`` per GPU), not
its booking: without sharing a booking is a share of the GPU's total, the same share of
a large GPU as of a small one, and would not tell them apart. A node is *broken* when
every GPU of the candidate's type on it was idle (no claim, under 1 GiB of reported use)
and the candidate takes only some of them: an idle whole node is what the next tp-8
request needs. Best fit keeps large GPUs free, since the same need fills a small GPU more.
The pick is the highest score, then fewer GPUs, then the lower worker id, then the lower
first GPU index; scores are compared at 6 decimals so float noise never decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from scheduler_core.candidates import Candidate
from scheduler_core.precise.fit import usable
from scheduler_core.scoring import MAX_SCORE
from scheduler_core.selection import Selection
from scheduler_core.workers import WorkerView

_FILL_WEIGHT, _WHOLE_WEIGHT = 0.7, 0.3
#: Reported use below this leaves a GPU idle (driver, display, monitoring processes).
_IDLE_USE = 1 << 30


#: A node of a candidate: (worker id, GPU type).
_NodeKey = tuple[int, str | None]
#: A node's state: all its GPUs idle, usable bytes by GPU index.
_Node = tuple[bool, dict[int, int]]


def _nodes(candidate: Candidate) -> list[tuple[WorkerView, tuple[int, ...], int]]:
    """Each node of a candidate: its worker, its GPUs, and the memory it needs there."""
    nodes = [(candidate.worker, candidate.gpu_indexes, candidate.claim.estimated_vram or 0)]
    nodes += [(s.worker, s.gpu_indexes, s.claim.estimated_vram or 0) for s in candidate.subordinates]
    return nodes


def _node_state(worker: WorkerView, gpu_type: str | None, selection: Selection) -> _Node:
    """Whether every GPU of the worker is idle, and each GPU's free memory."""
    free = selection.cluster.allocatable(worker, gpu_type)
    idle = all(
        g.index is not None
        and free.vram.get(g.index, 0) >= g.total - worker.reserved_vram
        and (g.used is None or g.used < _IDLE_USE)
        for g in worker.gpus
    )
    return idle, {g.index: usable(g, free) for g in worker.gpus if g.index is not None}


class PreciseScorer:
    """Fragmentation-aware scoring with deterministic tie-breaks."""

    name = "precise_fragmentation"
    policy: ClassVar[str] = "precise"

    def score(self, candidates: Sequence[Candidate], selection: Selection) -> list[float]:
        """Each candidate's score, in candidate order."""
        workers: dict[_NodeKey, WorkerView] = {}
        for candidate in candidates:
            for worker, _, _ in _nodes(candidate):
                workers.setdefault((worker.id, candidate.gpu_type), worker)
        states = {key: _node_state(w, key[1], selection) for key, w in workers.items()}
        return [_score(c, states) for c in candidates]

    def pick(self, candidates: Sequence[Candidate], scores: Sequence[float]) -> int | None:
        """The best candidate: score, then fewer GPUs, lower worker id, lower first GPU index."""
        if not candidates:
            return None

        def key(i: int) -> tuple[float, int, int, int]:
            c = candidates[i]
            gpus = len(c.gpu_indexes) + sum(len(s.gpu_indexes) for s in c.subordinates)
            return (-round(scores[i], 6), gpus, c.worker.id, min(c.gpu_indexes, default=0))

        return min(range(len(candidates)), key=key)


def _score(candidate: Candidate, states: dict[_NodeKey, _Node]) -> float:
    """The candidate's score from the states of its nodes."""
    needed = room = 0
    broken = 0
    nodes = _nodes(candidate)
    for worker, indexes, need in nodes:
        idle, free_by_index = states[(worker.id, candidate.gpu_type)]
        needed += need
        room += sum(free_by_index[index] for index in indexes)
        if idle and len(indexes) < len(worker.gpus):
            broken += 1
    fill = min(needed / room, 1.0) if room > 0 else 0.0
    return MAX_SCORE * (_FILL_WEIGHT * fill + _WHOLE_WEIGHT * (1 - broken / len(nodes)))
