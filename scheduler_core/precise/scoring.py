"""The precise scorer: pack tightly, keep idle nodes whole, break ties deterministically.

A candidate scores (0–100)::

    70 × Σ booked / Σ usable          over its GPUs (best fit: the GPU set it fills most)
  + 30 × (1 − share of its nodes it breaks)

A node is *broken* when every GPU of the candidate's type on it was idle (no
claim, no reported use beyond the margin) and the candidate takes only some of
them: an idle whole node is what the next tp-8 request needs. Best fit also
keeps large GPUs free, since the same booking fills a small GPU more. The pick
is the highest score, then fewer GPUs, then the lower worker id, then the lower
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


def _nodes(candidate: Candidate) -> list[tuple[WorkerView, tuple[int, ...], dict[int, int]]]:
    nodes = [(candidate.worker, candidate.gpu_indexes, dict(candidate.claim.vram))]
    nodes += [(s.worker, s.gpu_indexes, dict(s.claim.vram)) for s in candidate.subordinates]
    return nodes


class PreciseScorer:
    """Fragmentation-aware scoring with deterministic tie-breaks."""

    name = "precise_fragmentation"
    policy: ClassVar[str] = "precise"

    def score(self, candidates: Sequence[Candidate], selection: Selection) -> list[float]:
        """Each candidate's score, in candidate order."""
        margin = selection.precise.settings.free_margin if selection.precise else 0
        idle: dict[tuple[int, str | None], bool] = {}
        return [self._score(c, selection, margin, idle) for c in candidates]

    def _score(
        self,
        candidate: Candidate,
        selection: Selection,
        margin: int,
        idle: dict[tuple[int, str | None], bool],
    ) -> float:
        booked = room = 0
        broken = 0
        nodes = _nodes(candidate)
        for worker, indexes, claims in nodes:
            free = selection.cluster.allocatable(worker, candidate.gpu_type)
            by_index = {g.index: g for g in worker.gpus}
            for index in indexes:
                booked += claims.get(index, 0)
                room += usable(by_index[index], free, margin)
            key = (worker.id, candidate.gpu_type)
            if key not in idle:
                idle[key] = all(
                    g.index is not None
                    and free.vram.get(g.index, 0) >= g.total - worker.reserved_vram
                    and (g.used is None or g.used <= margin)
                    for g in worker.gpus
                )
            if idle[key] and len(indexes) < len(worker.gpus):
                broken += 1
        fill = min(booked / room, 1.0) if room > 0 else 0.0
        return MAX_SCORE * (_FILL_WEIGHT * fill + _WHOLE_WEIGHT * (1 - broken / len(nodes)))

    def pick(self, candidates: Sequence[Candidate], scores: Sequence[float]) -> int | None:
        """The best candidate: score, then fewer GPUs, lower worker id, lower first GPU index."""
        if not candidates:
            return None

        def key(i: int) -> tuple[float, int, int, int]:
            c = candidates[i]
            gpus = len(c.gpu_indexes) + sum(len(s.gpu_indexes) for s in c.subordinates)
            return (-round(scores[i], 6), gpus, c.worker.id, min(c.gpu_indexes, default=0))

        return min(range(len(candidates)), key=key)
