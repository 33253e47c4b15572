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

from scheduler_core.accounting import Allocatable
from scheduler_core.arguments import TpRule
from scheduler_core.caching import Rule
from scheduler_core.candidates import Candidate, Subordinate
from scheduler_core.cluster import ram_not_enough
from scheduler_core.cycle import CycleState, DecisionInputs
from scheduler_core.events import Action, Level, list_message
from scheduler_core.framework import Clears
from scheduler_core.outcomes import FailureTally, StageOutcome
from scheduler_core.precise.facts import PreciseFacts, facts_of
from scheduler_core.precise.facts import prepare as prepare_facts
from scheduler_core.precise.fit import Fit, Miss, Room, Verdicts, room
from scheduler_core.precise.messages import miss_line
from scheduler_core.precise.single_worker import claim_of, slots_of, verdicts_of
from scheduler_core.precise.wake import floor_for, widest
from scheduler_core.precise.windows import Balance, balance, balanced, sorted_slots, window_starts
from scheduler_core.reasons import MORE_CAPACITY, Reason
from scheduler_core.selection import Selection
from scheduler_core.wake import GpuFloor, WakeQuery
from scheduler_core.workers import Gpu, WorkerView

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
class _OfferInputs:
    """The offer rule's signature: one shape of one request."""

    facts: PreciseFacts
    shape: Shape
    ram_claim: int
    verdicts: Verdicts


@dataclass(frozen=True, slots=True)
class _Window:
    """A worker shape's tightest balanced k-GPU window that holds a rank on its own."""

    indexes: tuple[int, ...]
    rooms: tuple[Room, ...]

    @property
    def least(self) -> int:
        """The smallest usable memory of the window (workers are ordered by it)."""
        return min(r[2] for r in self.rooms)


@dataclass(frozen=True, slots=True)
class _Offer:
    """A worker and its window."""

    worker: WorkerView
    window: _Window


def _offer_window(
    inputs: _OfferInputs, gpus: tuple[Gpu, ...], allocatable: Allocatable
) -> _Window | Miss | None:
    """The tightest fitting window, else the best miss (None: no RAM or no balanced window)."""
    if ram_not_enough(inputs.ram_claim, allocatable):
        return None
    ordered = sorted_slots(slots_of(gpus, allocatable))
    rooms = tuple(room(slot) for slot in ordered)
    shape, size = inputs.shape, inputs.shape.gpus_per_node
    best: Miss | None = None
    check = balance(inputs.facts, shape.tp)
    for start in reversed(list(window_starts([r[2] for r in rooms], size, check))):
        window = rooms[start : start + size]
        verdict = inputs.verdicts((window, shape.tp, shape.pp))
        if isinstance(verdict, Fit):
            return _Window(tuple(gpu.index or 0 for gpu, _ in ordered[start : start + size]), window)
        if best is None or verdict.usable > best.usable:
            best = verdict
    return best


def _attach_offer(
    inputs: _OfferInputs, worker: WorkerView, outcome: _Window | Miss | None
) -> _Offer | Miss | None:
    """The worker's offer (its shape's window), or its shape's miss."""
    del inputs
    return _Offer(worker, outcome) if isinstance(outcome, _Window) else outcome


_OFFER_RULE = Rule("precise_multi_worker_offer", _offer_window, _attach_offer, reads_reported=True)


def _runs(offers: Sequence[_Offer], nodes: int, check: Balance) -> Iterator[tuple[_Offer, ...]]:
    for start in range(len(offers) - nodes + 1):
        run = tuple(offers[start : start + nodes])
        if balanced([r[2] for offer in run for r in offer.window.rooms], check):
            yield run


def _candidate(selection: Selection, gpu_type: str | None, run: tuple[_Offer, ...], fit: Fit) -> Candidate:
    """The leader is the lowest worker id; every node's claim carries the fraction.

    ``fit.bookings`` follows the GPUs of ``run`` in run order."""
    bookings = iter(fit.bookings)
    by_worker = {offer.worker.id: tuple(next(bookings) for _ in offer.window.indexes) for offer in run}
    claims = []
    for offer in sorted(run, key=lambda offer: offer.worker.id):
        indexes = offer.window.indexes
        node_fit = Fit(fit.fraction, by_worker[offer.worker.id], fit.kv_tokens, fit.need)
        claims.append((offer.worker, indexes, claim_of(node_fit, indexes, selection.ram_rule)))
    leader, indexes, claim = claims[0]
    subordinates = tuple(Subordinate(w, gpu_type, ix, c) for w, ix, c in claims[1:])
    return Candidate(leader, gpu_type, indexes, claim, subordinates=subordinates, kv_tokens=fit.kv_tokens)


def _memory_gpus(worker: WorkerView) -> int:
    """The worker's GPUs a window may use (indexed, with memory): what :func:`slots_of` keeps."""
    return sum(1 for gpu in worker.gpus if gpu.index is not None and gpu.total)


@dataclass(frozen=True, slots=True)
class _TypeRun:
    """What the stage's run over one GPU type's workers reads and tallies into."""

    facts: PreciseFacts
    verdicts: Verdicts
    gpu_type: str | None
    tally: FailureTally


class PreciseMultiWorker:
    """Several workers with k GPUs each, scored; partly used nodes take part."""

    name = "precise_multi_worker"
    policy: ClassVar[str] = "precise"
    clears: ClassVar[Clears] = {
        Reason.NO_NODE_SHAPE: MORE_CAPACITY,
        Reason.NO_BALANCED_GPU_SET: MORE_CAPACITY,  # SGLang's TP balance across the nodes
        Reason.WEIGHTS_DO_NOT_FIT: MORE_CAPACITY,
        Reason.KV_FLOOR_NOT_MET: MORE_CAPACITY,
        Reason.KV_TOKENS_BELOW_MINIMUM: MORE_CAPACITY,
        Reason.INSUFFICIENT_VRAM: MORE_CAPACITY,
    }

    def prepare(self, inputs: DecisionInputs, state: CycleState) -> None:
        """The request's :class:`PreciseFacts` (shared with the single-worker stage)."""
        prepare_facts(inputs, state)

    def wake_floor(self, query: WakeQuery) -> GpuFloor | None:
        """The least an automatic shape (tp = k GPUs per node, pp = nodes) or the user's tp/pp
        needs on each GPU; without the decision's facts, context plus a quarter of the weights
        over the most nodes × GPUs per node a shape may use; None without distributed
        inference (the stage is skipped)."""
        if query.model.distributed_inference_across_workers is False:
            return None
        nodes = min(len(query.workers), MAX_AUTO_NODES)
        per_node = min(widest(query.workers), MAX_AUTO_GPUS_PER_NODE)
        automatic = [(k, n) for n in range(2, nodes + 1) for k in range(1, per_node + 1)]  # as :func:`shapes`
        return floor_for(query, nodes * per_node, automatic)

    def skip(self, selection: Selection) -> bool:
        """Skipped under manual selection, without distributed inference, for diffusion."""
        return bool(selection.selected_workers) or not selection.distributed or facts_of(selection).diffusion

    def __call__(self, selection: Selection) -> StageOutcome:
        """The candidates of the first shape (fewest GPUs) that has any, over every GPU type;
        a worker that offers a shape no window misses with that miss's reason."""
        facts = facts_of(selection)
        verdicts = verdicts_of(selection, facts)
        tally = FailureTally(self.name)
        best: tuple[Miss, Shape] | None = None
        for gpu_type, workers in selection.workers_by_type.items():
            eligible = [
                w
                for w in workers
                if not ram_not_enough(selection.ram_claim, selection.cluster.allocatable(w, gpu_type))
            ]
            found, miss = self._of_type(selection, _TypeRun(facts, verdicts, gpu_type, tally), eligible)
            if found:
                return tally.outcome(found)
            if miss is not None and (best is None or miss[0].usable > best[0].usable):
                best = miss
        _record(selection, facts, best)
        return tally.outcome(())

    def _of_type(
        self, selection: Selection, of_type: _TypeRun, workers: list[WorkerView]
    ) -> tuple[list[Candidate], tuple[Miss, Shape] | None]:
        facts, verdicts, gpu_type = of_type.facts, of_type.verdicts, of_type.gpu_type
        widest = max((_memory_gpus(w) for w in workers), default=0)
        best: tuple[Miss, Shape] | None = None
        limit = facts.settings.max_shape_candidates
        for shape in shapes(facts, selection.gpu_count, len(workers), widest, selection.tp_rule):
            inputs = _OfferInputs(facts, shape, selection.ram_claim, verdicts)
            offers: list[_Offer] = []
            for worker, offer in selection.runner.run(_OFFER_RULE, inputs, gpu_type, workers):
                if isinstance(offer, _Offer):
                    offers.append(offer)
                elif offer is not None:
                    of_type.tally.add(offer.reason, worker)
                    if best is None or offer.usable > best[0].usable:
                        best = (offer, shape)
            offers.sort(key=lambda o: (o.window.least, o.worker.id))
            found: list[Candidate] = []
            for run in _runs(offers, shape.nodes, balance(facts, shape.tp)):
                rooms = tuple(r for offer in run for r in offer.window.rooms)
                verdict = verdicts((rooms, shape.tp, shape.pp))
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
