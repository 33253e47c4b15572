"""Candidate scoring (GPUStack ``policies/scorers/placement_scorer.py``) and the pick.

Scores are in 0–100 (``GPUSTACK_SCHEDULER_SCALE_UP_PLACEMENT_MAX_SCORE``).
*binpack* prefers candidates whose claims fill the most of what is free;
*spread* prefers workers and GPUs running fewer instances. The pick is the
first candidate with the highest score (strict ``>``), GPUStack's tie rule.
GPUStack's model-file locality scorer (max 5) needs ModelFile rows the
request does not carry, so it contributes nothing here.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, compress, groupby, islice, repeat
from typing import Any

from scheduler_core.accounting import Allocatable
from scheduler_core.candidates import Candidate, Claim
from scheduler_core.cluster import ClusterState
from scheduler_core.outcomes import CandidateRuns
from scheduler_core.ranking import Ranking, SlotRanking
from scheduler_core.selection import Selection

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
class _WorkerLoad:
    """One worker's instance counts, in total and per GPU index, and per model id.

    Keyed by index only, as GPUStack counts them (an instance without a GPU type
    still loads its GPUs). Independent of the model being placed, so a
    cross-decision memo can keep it while the worker's instances are unchanged.
    """

    total: int
    gpus: Mapping[int, int]
    by_model: Mapping[int | None, tuple[int, Mapping[int, int]]]
    #: Per busy GPU index, the GPU term of a model with no instance on the worker
    #: (``_gpu_term(0, instances on the GPU)``): the same for every such model.
    newcomer_terms: Mapping[int, float]
    #: Per busy GPU index, that term's share of a one-GPU candidate's score
    #: (``0.15 × term × 100``, the same floats as the full formula).
    newcomer_shares: Mapping[int, float]

    def counts(self, model_id: int | None) -> tuple[int, int]:
        """(placements of ``model_id``, placements of other models) on the worker."""
        if model_id is None:
            return 0, self.total
        current = self.by_model.get(model_id)
        placed = current[0] if current else 0
        return placed, self.total - placed

    def gpu_counts(self, model_id: int | None, index: int) -> tuple[int, int]:
        """(instances of ``model_id``, of other models) on GPU ``index``."""
        current = self.by_model.get(model_id) if model_id is not None else None
        placed = current[1].get(index, 0) if current else 0
        return placed, self.gpus.get(index, 0) - placed


def _worker_load(cluster: ClusterState, worker_id: int) -> _WorkerLoad:
    """GPUStack's per-worker and per-GPU instance counts for one worker, per model.

    Counts every placement on the worker: an instance's main placement and
    each subordinate placed there.
    """
    gpus: dict[int, int] = {}
    by_model: dict[int | None, tuple[int, dict[int, int]]] = {}
    total = 0
    for instance in cluster.instances_on(worker_id):
        placements = [instance.gpu_indexes or ()] if instance.worker_id == worker_id else []
        servers = instance.distributed_servers
        if servers is not None and servers.subordinate_workers:
            placements += [
                sub.gpu_indexes or () for sub in servers.subordinate_workers if sub.worker_id == worker_id
            ]
        for indexes in placements:
            count = len(indexes) or 1  # a CPU instance counts once
            placed, per_gpu = by_model.get(instance.model_id) or (0, {})
            total += count
            for index in indexes:
                gpus[index] = gpus.get(index, 0) + 1
                per_gpu[index] = per_gpu.get(index, 0) + 1
            by_model[instance.model_id] = (placed + count, per_gpu)
    newcomer = {index: _gpu_term(0, count) for index, count in gpus.items()}
    shares = {index: _GPU_WEIGHT * term * MAX_SCORE for index, term in newcomer.items()}
    return _WorkerLoad(total, gpus, by_model, newcomer, shares)


def _inverse(value: float, low: float, high: float) -> float:
    return 1.0 if high <= low else 1.0 - (value - low) / (high - low)


@dataclass(frozen=True, slots=True)
class _Ranges:
    """Min/max instance counts over the candidates' workers (the spread normalisation)."""

    current: tuple[int, int]
    other: tuple[int, int]
    any_worker_without_model: bool


def _ranges(counts: Iterable[tuple[int, int]]) -> _Ranges:
    pairs = list(counts)
    currents = [current for current, _ in pairs]
    others = [other for _, other in pairs]
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


def _gpu_term(placed: int, others: int) -> float:
    return 1.0 / (1 + placed + 0.2 * others)


def _newcomer_score(indexes: tuple[int, ...], load: _WorkerLoad) -> float:
    """:func:`_gpu_score` for a model with no instance on the worker (the same floats)."""
    terms = load.newcomer_terms
    if len(indexes) == 1:
        return terms.get(indexes[0], 1.0)  # 1 / (1 + 0 + 0.2 × 0) on an idle GPU
    return sum(map(terms.get, indexes, repeat(1.0))) / len(indexes)


def _gpu_score(indexes: tuple[int, ...], load: _WorkerLoad, model_id: int | None) -> float:
    """The GPU term: the mean over the candidate's GPUs of 1 / (1 + placed + 0.2 × others)."""
    if len(indexes) == 1:  # the common single-GPU case, without the list
        return _gpu_term(*load.gpu_counts(model_id, indexes[0]))
    terms = [_gpu_term(*load.gpu_counts(model_id, i)) for i in indexes]
    return sum(terms) / len(terms)


#: The GPU term of a candidate whose GPUs run no instance: 1 / (1 + 0 + 0.2 × 0) for
#: each GPU, and the mean of n such terms is exactly 1.0 as well.
_IDLE_GPU_SCORE = 1.0
#: GPUStack's spread weights: the worker term and the GPU term of a GPU candidate.
_WORKER_WEIGHT, _GPU_WEIGHT = 0.85, 0.15
#: The GPU term's share of the score on GPUs that run nothing (``0.15 × 1.0 × 100``).
_IDLE_SHARE = _GPU_WEIGHT * _IDLE_GPU_SCORE * MAX_SCORE
#: A candidate's worker id (the candidates of one worker come one after another).
_WORKER_ID = operator.attrgetter("worker.id")


def _run_worker_id(run: Sequence[Candidate]) -> int:
    return run[0].worker.id


def _holders(
    cluster: ClusterState, loads: Mapping[int, _WorkerLoad], model_id: int | None
) -> dict[int, tuple[int, int]]:
    """(placements of the model, of other models) on each worker that runs the model (usually
    none: a new model)."""
    if model_id is None or not cluster.runs_model(model_id):
        return {}
    return {
        worker_id: load.counts(model_id) for worker_id, load in loads.items() if model_id in load.by_model
    }


def spread_scores(
    candidates: Sequence[Candidate],
    cluster: ClusterState,
    model_id: int | None,
    runs: Sequence[Sequence[Candidate]] | None = None,
) -> list[float]:
    """Spread scores: fewer instances on the worker and on its GPUs score higher.

    Counts are taken per candidate worker from the instances bound to it
    (:meth:`ClusterState.per_worker`). A GPU candidate scores ``0.85 × worker
    term + 0.15 × GPU term × 100`` and a CPU one the worker term alone. The
    worker term depends only on the worker's two counts, so it is computed once
    per distinct pair; the GPU term is exactly 1.0 on GPUs that run nothing, and
    for a model with no instance on a worker its one-GPU shares are part of the
    worker's load (which a memo keeps while the worker's instances are unchanged).
    Every score is the same float the formula gives term by term.

    ``runs``, when given, are ``candidates`` as the non-empty runs of one worker each they
    were joined from (:class:`~scheduler_core.outcomes.CandidateRuns`): scores are then
    kept per run, so a decision looks up one run per worker instead of every candidate.
    """
    if not candidates:
        return []
    ids = map(_run_worker_id, runs) if runs is not None else [candidate.worker.id for candidate in candidates]
    loads = cluster.per_worker(
        dict.fromkeys(ids), ("spread_load",), lambda worker_id: _worker_load(cluster, worker_id),
    )
    holders = _holders(cluster, loads, model_id)
    if holders:
        return _spread_with_holders(cluster, candidates, runs, loads, model_id, holders)
    # A model with no instance on any candidate worker: its own count is 0 everywhere, so a
    # score depends on the candidate, its worker's load and the range of the workers' totals.
    totals = [load.total for load in loads.values()]
    ranges = _Ranges((0, 0), (min(totals), max(totals)), True)
    return _newcomer_kept(cluster, runs if runs is not None else candidates, runs is not None, loads, ranges)


def _newcomer_kept(
    cluster: ClusterState,
    items: Sequence[Any],
    by_run: bool,
    loads: Mapping[int, _WorkerLoad],
    ranges: _Ranges,
) -> list[float]:
    """The newcomer scores of ``items`` (candidates, or with ``by_run`` the runs of one worker
    each), in order, each item's kept across decisions while its worker and ``ranges`` are
    unchanged."""
    if by_run:  # one worker's run at a time: an unchanged run keeps its scores
        terms: dict[int, float] = {}
        scored = cluster.per_item(
            ("spread_newcomer_runs", ranges), items, _run_worker_id,
            lambda part: [_newcomer_run(run, loads[run[0].worker.id], ranges, terms) for run in part],
        )
        return list(chain.from_iterable(scored))
    return cluster.per_item(
        ("spread_newcomer", ranges), items, _WORKER_ID,
        lambda part: _spread_for_newcomer(part, loads, ranges),
    )


def _spread_for_newcomer(
    candidates: Iterable[Candidate], loads: Mapping[int, _WorkerLoad], ranges: _Ranges
) -> list[float]:
    """:func:`spread_scores` of a model with no instance on any candidate worker, each
    candidate's score from its own worker's load and ``ranges`` alone."""
    terms: dict[int, float] = {}
    scores: list[float] = []
    for worker_id, run in groupby(candidates, _WORKER_ID):  # a worker's candidates come together
        scores += _newcomer_run(run, loads[worker_id], ranges, terms)
    return scores


def _newcomer_run(
    run: Iterable[Candidate], load: _WorkerLoad, ranges: _Ranges, terms: dict[int, float]
) -> list[float]:
    """The newcomer scores of one worker's candidates (``terms``: see :func:`_worker_term`)."""
    return _newcomer_scored(_newcomer_shares(run, load), _worker_term(load.total, ranges, terms))


def _newcomer_shares(run: Iterable[Candidate], load: _WorkerLoad) -> list[float | None]:
    """The part of a newcomer's score of each of one worker's candidates that the range of
    the workers' totals does not change: its GPU term's share, ``0.15 × term × 100`` (None: a
    candidate without GPUs, which the worker term alone scores)."""
    shares: list[float | None] = []
    append = shares.append
    busy = load.gpus.keys()
    for candidate in run:
        indexes = candidate.gpu_indexes
        if not indexes:
            append(None)
        elif len(indexes) == 1:  # an idle GPU has no share listed: its term is 1.0
            append(load.newcomer_shares.get(indexes[0], _IDLE_SHARE))
        elif busy.isdisjoint(indexes):  # every term 1.0, and so their mean
            append(_IDLE_SHARE)
        else:
            append(_GPU_WEIGHT * _newcomer_score(indexes, load) * MAX_SCORE)
    return shares


def _worker_term(total: int, ranges: _Ranges, terms: dict[int, float]) -> float:
    """A newcomer's worker term on a worker running ``total`` instances (× 100), kept in ``terms``
    per total (for one ``ranges``)."""
    term = terms.get(total)
    if term is None:
        term = terms[total] = _worker_score(0, total, ranges) * MAX_SCORE
    return term


def _newcomer_scored(shares: list[float | None], worker: float) -> list[float]:
    """The newcomer scores of one worker's candidates from their shares and its worker term:
    ``0.85 × term + share`` (the term alone for a candidate without GPUs)."""
    base = _WORKER_WEIGHT * worker
    if None in shares:
        return [worker if share is None else base + share for share in shares]
    return list(map(base.__add__, shares))  # type: ignore[arg-type]


def _spread_with_holders(
    cluster: ClusterState,
    candidates: Sequence[Candidate],
    runs: Sequence[Sequence[Candidate]] | None,
    loads: Mapping[int, _WorkerLoad],
    model_id: int | None,
    holders: Mapping[int, tuple[int, int]],
) -> list[float]:
    """:func:`spread_scores` of a model that already runs on some of the candidate workers
    (``holders``: their counts).

    On a worker without the model a candidate's score is the newcomer's formula (its own
    count is 0, the worker term reads only the range of the others' counts, and the GPU
    term is a newcomer's), so those candidates (or, given ``runs``, those workers' runs) keep
    their scores across decisions in the same tables as a new model's whenever that range
    is the workers' totals' range. Only the candidates of the few workers running the model
    are scored term by term.
    """
    elsewhere = ((0, load.total) for worker_id, load in loads.items() if worker_id not in holders)
    ranges = _ranges([*holders.values(), *elsewhere])
    if not ranges.any_worker_without_model:  # every worker runs it: nothing to keep
        return _spread_with_replicas(candidates, loads, model_id, holders, ranges)
    items: Sequence[Any] = runs if runs is not None else candidates
    worker_of = _run_worker_id if runs is not None else _WORKER_ID
    held = [worker_of(item) in holders for item in items]
    others = list(compress(items, map(operator.not_, held)))
    kept = iter(_newcomer_kept(cluster, others, runs is not None, loads, _Ranges((0, 0), ranges.other, True)))
    theirs = compress(items, held)
    own = iter(_spread_with_replicas(
        list(chain.from_iterable(theirs) if runs is not None else theirs), loads, model_id, holders, ranges,
    ))
    sizes = map(len, items) if runs is not None else repeat(1)
    scores: list[float] = []
    for holder, size in zip(held, sizes, strict=False):  # sizes: repeat(1) is endless
        scores += islice(own if holder else kept, size)
    return scores


def _spread_with_replicas(
    candidates: Sequence[Candidate],
    loads: Mapping[int, _WorkerLoad],
    model_id: int | None,
    holders: Mapping[int, tuple[int, int]],
    ranges: _Ranges,
) -> list[float]:
    """:func:`spread_scores` of candidates, term by term, for a model that already runs on some
    candidate worker: ``holders`` are the counts of the workers running it, ``ranges`` the
    counts' ranges over every candidate worker."""
    by_counts: dict[tuple[int, int], float] = {}
    scores: list[float] = []
    append = scores.append
    last_id: int | None = None
    load = next(iter(loads.values()))
    worker = base = 0.0
    newcomer = busy = False
    for candidate in candidates:  # a worker's candidates come one after another
        worker_id = candidate.worker.id
        if worker_id != last_id:
            last_id, load = worker_id, loads[worker_id]
            pair = holders.get(worker_id) or (0, load.total)
            worker = by_counts.get(pair, -1.0)
            if worker < 0:
                worker = by_counts[pair] = _worker_score(*pair, ranges) * MAX_SCORE
            base = _WORKER_WEIGHT * worker
            busy, newcomer = bool(load.gpus), pair[0] == 0
        indexes = candidate.gpu_indexes
        if not indexes:
            append(worker)
        elif not busy:  # nothing runs on the worker's GPUs
            append(base + _IDLE_SHARE)
        else:
            gpu = _newcomer_score(indexes, load) if newcomer else _gpu_score(indexes, load, model_id)
            append(base + _GPU_WEIGHT * gpu * MAX_SCORE)
    return scores


def score_candidates(
    candidates: Sequence[Candidate],
    strategy: str,
    cluster: ClusterState,
    model_id: int | None,
    runs: Sequence[Sequence[Candidate]] | None = None,
) -> list[float]:
    """The placement score of each candidate, in candidate order (``runs``: see
    :func:`spread_scores`)."""
    if strategy == "binpack":
        return [binpack_score(c, cluster) for c in candidates]
    return spread_scores(candidates, cluster, model_id, runs)


def pick_highest(scores: Sequence[float]) -> int | None:
    """Index of the first highest score (GPUStack: strict ``>``), None when there is none."""
    if not scores:
        return None
    # max() keeps the first of equal maxima, which is GPUStack's strict ">" walk, and
    # index() finds that first one (max() over the values makes the same comparisons).
    return scores.index(max(scores))


class _SpreadStanding:
    """The spread scores of a model that runs on none of the candidate workers, kept across
    decisions on the same slots (:class:`~scheduler_core.outcomes.CandidateRuns`: one stage, its
    inputs and worker sequences).

    Such a model's own count is 0 everywhere, so a candidate's score is the newcomer formula
    on its worker's load and the range of the candidate workers' instance totals
    (:func:`_spread_for_newcomer`): a slot keeps its scores while its run is the same object
    (the runner makes a new one whenever its worker's instances change) and the range is
    unchanged; the range is kept as a count of the non-empty slots' totals. A slot also keeps
    its candidates' shares (the part of a score the range does not change), so when the range
    moves every score is made again from the kept totals and shares, without reading a
    worker's load.
    """

    __slots__ = ("counts", "forced", "lineage", "ranges", "ranking", "shares", "totals", "where")

    def __init__(self, forced: tuple[int, int] | None = None) -> None:
        #: The range of the other workers' counts the scores are made with, whatever the slots'
        #: totals are (a model running on the workers that set the range: :meth:`with_holders`);
        #: None: the range of the non-empty slots' totals.
        self.forced = forced
        self.ranking: SlotRanking | None = None
        #: Per slot, its worker's instance total (-1: an empty slot).
        self.totals: list[int] = []
        #: Per slot, its candidates' shares (:func:`_newcomer_shares`; empty: an empty slot).
        self.shares: list[list[float | None]] = []
        #: How many non-empty slots have each total.
        self.counts: Counter[int] = Counter()
        self.ranges: _Ranges | None = None
        #: The kept runs and versions the ranking's slots were last taken from.
        self.lineage: tuple[tuple[Any, int], ...] = ()
        #: Each worker's slot positions (the layout is the standing's own: built once).
        self.where: dict[int, list[int]] | None = None

    def rank(self, runs: CandidateRuns, cluster: ClusterState) -> SlotRanking | None:
        """The ranking of this decision's slots (their runs joined are its candidates); None
        when a run is too long for a key (:meth:`SlotRanking.fits`)."""
        ranking = self.ranking
        slots = runs.slots
        if ranking is None or len(ranking.slots) != len(slots):
            return self._synced(runs, self._rebuild(slots, cluster) if SlotRanking.fits(slots) else None)
        changed = self._changed(runs, ranking)
        if not SlotRanking.fits([slots[position] for position in changed]):
            self.ranking = None
            return None
        loads = _slot_loads(cluster, slots, changed)
        for position in changed:
            self._count(position, loads, slots[position])
        if self._ranges() != self.ranges:  # the range moved: every score with it
            return self._synced(runs, self._scored(slots))
        if changed:
            ranking.update(slots, changed, self._slot_scorer())
        return self._synced(runs, ranking)

    def with_holders(
        self, runs: CandidateRuns, cluster: ClusterState, model_id: int, base: SlotRanking
    ) -> Ranking | None:
        """``base`` (this standing's ranking, brought up to date) for a model that runs on some
        workers: the slots of the candidate workers running it scored term by term over it
        (:func:`_spread_with_holders`'s scores); None when every candidate worker runs it.

        When the workers running it set the range of the other workers' counts (the fewest
        or most other instances), the other slots' scores are another standing's, kept for
        that range (:attr:`forced`: the newcomer formula with that range, as
        :func:`_spread_with_holders` scores them), instead of ``base``.
        """
        slots = runs.slots
        where = self._where(runs)
        held = [(worker_id, slot) for worker_id in cluster.model_hosts(model_id)
                for slot in where.get(worker_id, ()) if slots[slot]]
        if not held:
            return base
        loads = cluster.per_worker(
            dict.fromkeys(worker_id for worker_id, _ in held), ("spread_load",),
            lambda worker_id: _worker_load(cluster, worker_id),
        )
        holders = {worker_id: loads[worker_id].counts(model_id) for worker_id, _ in held}
        rest = self.counts.copy()
        rest.subtract(self.totals[slot] for _, slot in held)
        others = [total for total, left in rest.items() if left > 0]
        if not others or self.ranges is None:  # every candidate worker runs the model
            return None
        others += (other for _, other in holders.values())
        other = (min(others), max(others))
        if other != self.ranges.other:
            key = ("spread_standing", runs.key, other)
            forced = cluster.kept(key, runs.layout, lambda: self._forced(other, runs), _weight(runs))
            kept = None if forced is None else forced.rank(runs, cluster)
            if kept is None:
                return None
            base = kept
        ranges = _Ranges((0, max(placed for placed, _ in holders.values())), other, True)
        replaced = {
            slot: _spread_with_replicas(slots[slot], loads, model_id, holders, ranges) for _, slot in held
        }
        return base.overlaid(replaced)

    def _forced(self, other: tuple[int, int], runs: CandidateRuns) -> _SpreadStanding:
        """A standing for the range ``other`` on this one's slots, taken from this one (brought
        up to date with ``runs``): the same totals and shares, every score made again with
        ``other``, without reading a worker's load."""
        standing = _SpreadStanding(other)
        standing.totals, standing.shares = list(self.totals), list(self.shares)
        standing.counts, standing.where = self.counts.copy(), self.where
        standing._synced(runs, standing._scored(runs.slots))
        return standing

    def _where(self, runs: CandidateRuns) -> dict[int, list[int]]:
        """Each worker's slot positions (a worker of several GPU types has one per type)."""
        if self.where is None:
            where: dict[int, list[int]] = {}
            offset = 0
            for workers in runs.layout:
                for position, worker in enumerate(workers, start=offset):
                    where.setdefault(worker.id, []).append(position)
                offset += len(workers)
            self.where = where
        return self.where

    def _changed(self, runs: CandidateRuns, ranking: SlotRanking) -> list[int]:
        """The slots whose run is not the ranking's: from the kept runs' logs when the ranking
        was last brought up to date from the same runs (the positions rewritten since), else
        by comparing every slot."""
        synced, lineage = self.lineage, runs.lineage
        if not lineage or len(synced) != len(lineage):
            return ranking.changed(runs.slots)
        changed: list[int] = []
        offset = 0
        for (run, _), (was, was_version), workers in zip(lineage, synced, runs.layout, strict=True):
            since = run.changed_since(was_version) if run is not None and run is was else None
            if since is None:
                return ranking.changed(runs.slots)
            changed += (offset + position for position in since)
            offset += len(workers)
        return changed

    def _synced(self, runs: CandidateRuns, ranking: SlotRanking | None) -> SlotRanking | None:
        self.lineage = runs.lineage if ranking is not None else ()
        return ranking

    def _rebuild(self, slots: Sequence[Sequence[Candidate]], cluster: ClusterState) -> SlotRanking:
        loads = _slot_loads(cluster, slots, range(len(slots)))
        self.totals = [-1] * len(slots)
        self.shares = [[] for _ in slots]
        self.counts = Counter()
        for position, run in enumerate(slots):
            self._count(position, loads, run)
        return self._scored(slots)

    def _scored(self, slots: Sequence[Sequence[Candidate]]) -> SlotRanking:
        """A new ranking of ``slots``, every score made from the kept totals and shares with
        the range they give now."""
        ranges = self.ranges = self._ranges()
        shares = list(chain.from_iterable(self.shares))
        if None in shares:  # a candidate without GPUs: its score is not a share added to a base
            joined = list(chain.from_iterable(map(self._slot_scorer(), range(len(slots)), slots)))
        else:  # at C speed: each candidate's worker base (by its slot's total) plus its share
            terms: dict[int, float] = {}
            bases = {total: _WORKER_WEIGHT * _worker_term(total, ranges, terms) for total in self.counts}
            totals = chain.from_iterable(map(repeat, self.totals, map(len, self.shares)))
            joined = list(map(operator.add, map(bases.__getitem__, totals), shares))
        self.ranking = SlotRanking(slots, joined)
        return self.ranking

    def _slot_scorer(self) -> Callable[[int, Sequence[Candidate]], list[float]]:
        """The scores of a slot's run from its kept total and shares, with :attr:`ranges`."""
        ranges, totals, shares = self.ranges, self.totals, self.shares
        assert ranges is not None  # set with the totals
        terms: dict[int, float] = {}

        def scores_of(position: int, run: Sequence[Candidate]) -> list[float]:
            if not run:
                return []
            return _newcomer_scored(shares[position], _worker_term(totals[position], ranges, terms))

        return scores_of

    def _count(self, position: int, loads: Mapping[int, _WorkerLoad], run: Sequence[Candidate]) -> None:
        """Take the slot's run: its worker's total into the counts, its candidates' shares."""
        counts, old = self.counts, self.totals[position]
        if old >= 0:
            left = counts[old] - 1
            if left:
                counts[old] = left
            else:
                del counts[old]
        load = loads[run[0].worker.id] if run else None
        new = -1 if load is None else load.total
        self.totals[position] = new
        self.shares[position] = [] if load is None else _newcomer_shares(run, load)
        if new >= 0:
            counts[new] += 1

    def _ranges(self) -> _Ranges:
        if self.forced is not None:
            return _Ranges((0, 0), self.forced, True)
        counts = self.counts
        return _Ranges((0, 0), (min(counts), max(counts)), True)


def _weight(runs: CandidateRuns) -> int:
    """The memory a standing on ``runs`` holds, in the memo's unit (:attr:`SnapshotMemo.KEPT_WEIGHT`):
    its slots and its candidates (about 80 and 120 bytes each, at 2,000 × 8)."""
    return len(runs.slots) + len(runs.candidates)


def _slot_loads(
    cluster: ClusterState, slots: Sequence[Sequence[Candidate]], positions: Iterable[int]
) -> dict[int, _WorkerLoad]:
    """The loads of the workers of the non-empty slots at ``positions``."""
    ids = dict.fromkeys(slots[position][0].worker.id for position in positions if slots[position])
    return cluster.per_worker(ids, ("spread_load",), lambda worker_id: _worker_load(cluster, worker_id))


class GpustackScorer:
    """GPUStack's placement scorer (the model's spread/binpack) and its first-highest pick."""

    name = "gpustack"

    def rank(self, candidates: Sequence[Candidate], selection: Selection) -> Ranking | None:
        """The pick and the best candidates, kept across decisions: for a spread model, with a
        memo, on candidates a stage filed as slots (:class:`_SpreadStanding`; a model already
        running on some of their workers when the others' range is the kept one); None
        otherwise (then :meth:`score` and :meth:`pick`)."""
        model = selection.model
        runs = selection.state.get(CandidateRuns)
        if model.placement_strategy == "binpack" or runs is None or runs.candidates is not candidates:
            return None
        cluster = selection.cluster
        standing = cluster.kept(("spread_standing", runs.key), runs.layout, _SpreadStanding, _weight(runs))
        base = None if standing is None else standing.rank(runs, cluster)
        if standing is None or base is None:
            return None
        if model.id is None or not cluster.runs_model(model.id):
            return base
        return standing.with_holders(runs, cluster, model.id, base)

    def score(self, candidates: Sequence[Candidate], selection: Selection) -> list[float]:
        """The placement score of each candidate, in candidate order."""
        model = selection.model
        runs = selection.state.get(CandidateRuns)
        joined = runs.runs if runs is not None and runs.candidates is candidates else None
        return score_candidates(candidates, model.placement_strategy, selection.cluster, model.id, joined)

    def pick(self, candidates: Sequence[Candidate], scores: Sequence[float]) -> int | None:
        """The first highest score."""
        return pick_highest(scores)
