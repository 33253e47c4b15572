"""Precise stage 2: several workers, the same number of GPUs on each, partly used nodes allowed.

Shapes are ``nodes × k`` GPUs. With a requested world size W (tp × pp × dp),
every ``nodes`` dividing W gives ``k = W / nodes`` and the requested tp/pp.
Without one, tp = k and pp = nodes (how the launch arguments derive them), for
every k passing the TP divisibility checks, fewest GPUs in total first (then
fewer nodes). For a shape, each worker offers its tightest balanced k-GPU
window that holds a rank on its own; workers are ordered by that window's
usable memory (then id) and every run of ``nodes`` consecutive workers whose
GPUs are balanced together and pass the fit as a whole is a candidate. The
first shape with candidates wins; the scorer ranks them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

from scheduler_core.arguments import TpRule
from scheduler_core.candidates import Candidate, Subordinate
from scheduler_core.cluster import ram_not_enough
from scheduler_core.events import Action, Level, list_message
from scheduler_core.framework import Clears
from scheduler_core.precise.facts import PreciseFacts
from scheduler_core.precise.fit import Fit, Miss, Slot, evaluate
from scheduler_core.precise.messages import miss_line
from scheduler_core.precise.single_worker import claim_of, slots_of
from scheduler_core.precise.windows import balanced, sorted_slots, windows
from scheduler_core.reasons import MORE_CAPACITY, Reason
from scheduler_core.selection import Selection
from scheduler_core.workers import WorkerView

#: Nodes a distributed candidate may span at most when the request sets no world size.
MAX_AUTO_NODES = 8
#: GPUs per node tried at most when the request sets no world size.
MAX_AUTO_GPUS_PER_NODE = 16


@dataclass(frozen=True, slots=True)
class Shape:
    """``nodes × gpus_per_node`` GPUs running tp × pp ranks (× dp replicas)."""

    nodes: int
    gpus_per_node: int
    tp: int
    pp: int


def shapes(
    facts: PreciseFacts, gpu_count: int | None, workers: int, widest: int, tp_rule: TpRule
) -> list[Shape]:
    """The shapes to try, fewest GPUs first, then fewer nodes."""
    found: list[Shape] = []
    if gpu_count:
        tp, pp = facts.tp or 1, facts.pp or 1
        for nodes in range(2, min(workers, gpu_count) + 1):
            if gpu_count % nodes == 0 and gpu_count // nodes <= widest:
                found.append(Shape(nodes, gpu_count // nodes, tp, pp))
        return found
    for nodes in range(2, min(workers, MAX_AUTO_NODES) + 1):
        for k in range(1, min(widest, MAX_AUTO_GPUS_PER_NODE) + 1):
            if tp_rule.divisible(k):
                found.append(Shape(nodes, k, k, nodes))
    return sorted(found, key=lambda s: (s.nodes * s.gpus_per_node, s.nodes))


@dataclass(frozen=True, slots=True)
class _Offer:
    """A worker's tightest k-GPU window that holds a rank on its own."""

    worker: WorkerView
    window: tuple[Slot, ...]

    @property
    def least(self) -> int:
        return min(free for _, free in self.window)


#: Verdicts of one decision by GPU set signature (total, type, vendor, usable per GPU) and shape.
_Seen = dict[tuple[object, ...], Fit | Miss]


def _verdict(facts: PreciseFacts, window: Sequence[Slot], shape: Shape, seen: _Seen) -> Fit | Miss:
    key = (shape, *((g.total, g.type, g.vendor, free) for g, free in window))
    verdict = seen.get(key)
    if verdict is None:
        verdict = seen[key] = evaluate(facts, window, shape.tp, shape.pp)
    return verdict


def _offer(
    facts: PreciseFacts, worker: WorkerView, slots: list[Slot], shape: Shape, seen: _Seen
) -> _Offer | Miss | None:
    best: Miss | None = None
    for window in windows(slots, shape.gpus_per_node):
        verdict = _verdict(facts, window, shape, seen)
        if isinstance(verdict, Fit):
            return _Offer(worker, window)
        if best is None or verdict.usable > best.usable:
            best = verdict
    return best


def _runs(offers: Sequence[_Offer], nodes: int) -> Iterator[tuple[_Offer, ...]]:
    for start in range(len(offers) - nodes + 1):
        run = tuple(offers[start : start + nodes])
        if balanced([slot for offer in run for slot in offer.window]):
            yield run


def _candidate(selection: Selection, gpu_type: str | None, run: tuple[_Offer, ...], fit: Fit) -> Candidate:
    """The leader is the lowest worker id; every node's claim carries the fraction."""
    members = sorted(run, key=lambda offer: offer.worker.id)
    bookings = iter(fit.bookings)
    claims = []
    for offer in members:
        indexes = tuple(gpu.index or 0 for gpu, _ in offer.window)
        node_fit = Fit(fit.fraction, tuple(next(bookings) for _ in indexes), fit.kv_tokens, fit.need)
        claims.append((offer.worker, indexes, claim_of(node_fit, indexes, selection.ram_rule)))
    leader, indexes, claim = claims[0]
    subordinates = tuple(Subordinate(w, gpu_type, ix, c) for w, ix, c in claims[1:])
    return Candidate(leader, gpu_type, indexes, claim, subordinates=subordinates, kv_tokens=fit.kv_tokens)


class PreciseMultiWorker:
    """Several workers with k GPUs each, scored; partly used nodes take part."""

    name = "precise_multi_worker"
    policy: ClassVar[str] = "precise"
    clears: ClassVar[Clears] = {
        Reason.NO_NODE_SHAPE: MORE_CAPACITY,
        Reason.WEIGHTS_DO_NOT_FIT: MORE_CAPACITY,
        Reason.KV_FLOOR_NOT_MET: MORE_CAPACITY,
        Reason.KV_TOKENS_BELOW_MINIMUM: MORE_CAPACITY,
        Reason.INSUFFICIENT_VRAM: MORE_CAPACITY,
    }

    def skip(self, selection: Selection) -> bool:
        """Skipped under manual selection, without distributed inference, for diffusion and gpustack."""
        facts = selection.precise
        return (
            facts is None or bool(selection.selected_workers) or not selection.distributed or facts.diffusion
        )

    def __call__(self, selection: Selection) -> list[Candidate]:
        """The candidates of the first shape (fewest GPUs) that has any, over every GPU type."""
        facts = selection.precise
        assert facts is not None  # skip() guards it
        by_type = {
            gpu_type: [
                (w, sorted_slots(slots_of(facts, w.gpus, selection.cluster.allocatable(w, gpu_type))))
                for w in workers
                if not ram_not_enough(selection.ram_claim, selection.cluster.allocatable(w, gpu_type))
            ]
            for gpu_type, workers in selection.workers_by_type.items()
        }
        best: tuple[Miss, Shape] | None = None
        for gpu_type, slotted in by_type.items():
            found, miss = self._of_type(selection, facts, gpu_type, slotted)
            if found:
                return found
            if miss is not None and (best is None or miss[0].usable > best[0].usable):
                best = miss
        _record(selection, facts, best)
        return []

    def _of_type(
        self,
        selection: Selection,
        facts: PreciseFacts,
        gpu_type: str | None,
        slotted: list[tuple[WorkerView, list[Slot]]],
    ) -> tuple[list[Candidate], tuple[Miss, Shape] | None]:
        widest = max((len(slots) for _, slots in slotted), default=0)
        best: tuple[Miss, Shape] | None = None
        limit = facts.settings.max_shape_candidates
        seen: _Seen = {}
        for shape in shapes(facts, selection.gpu_count, len(slotted), widest, selection.tp_rule):
            offers: list[_Offer] = []
            for worker, slots in slotted:
                offer = _offer(facts, worker, slots, shape, seen)
                if isinstance(offer, _Offer):
                    offers.append(offer)
                elif offer is not None and (best is None or offer.usable > best[0].usable):
                    best = (offer, shape)
            offers.sort(key=lambda o: (o.least, o.worker.id))
            found: list[Candidate] = []
            for run in _runs(offers, shape.nodes):
                verdict = _verdict(facts, [slot for offer in run for slot in offer.window], shape, seen)
                if isinstance(verdict, Fit):
                    found.append(_candidate(selection, gpu_type, run, verdict))
                    if len(found) >= limit:
                        break
            if found:
                return found, None
        return [], best


def _record(selection: Selection, facts: PreciseFacts, best: tuple[Miss, Shape] | None) -> None:
    if best is None:
        line = "No combination of workers with the same number of balanced GPUs can run the model."
        reason = Reason.NO_NODE_SHAPE
    else:
        miss, shape = best
        where = f"the best node for {shape.nodes} × {shape.gpus_per_node} GPUs"
        line = miss_line(facts, miss, where, shape.gpus_per_node)
        reason = miss.reason
    selection.log.events.add(Level.INFO, Action.AUTO_MULTI_WORKER_MULTI_GPU, list_message(line), reason)
