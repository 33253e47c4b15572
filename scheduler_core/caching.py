"""Reuse of work within and across decisions: the runner (with :mod:`scheduler_core.memo`,
the only modules that know about it).

The rules (filters, strategies, the fraction calculator, scoring) are pure and
cache-free. Three things here make them cheap to run over large clusters, and
none changes a result (property tests compare decisions with and without):

* :class:`StageRunner` maps a per-worker rule over workers. Workers whose GPUs
  and allocatable memory are equal (a homogeneous fleet) get one evaluation
  per decision; with a :class:`SnapshotMemo` an unchanged worker's outcome is
  also reused from the previous decision with the same inputs, and a run over
  the very same workers as the rule's last run patches that run with the
  workers the memo's *journal* says changed since (a booking costs one
  worker's evaluation, not a walk over thousands).
* :class:`Memoized` wraps a pure function of a hashable argument that a rule
  needs many times with few distinct arguments (``policy: precise``'s per-rank
  budget by GPU size and layout, its verdict by GPU set and layout):
  :meth:`StageRunner.memoized` hands out one per decision, shared by every
  strategy, and with a memo across decisions while its signature (every other
  input of the function) is equal.
* :class:`~scheduler_core.memo.SnapshotMemo` (:mod:`scheduler_core.memo`) is
  what a long-lived decider keeps across ``schedule()`` calls; this module
  is the runner that uses it.

Nomad's ``FeasibilityWrapper`` is the model: the checker stays small, the
wrapper alone decides when its answer can be reused.
"""

from __future__ import annotations

import operator
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, compress, count, repeat
from typing import Any, Generic, Protocol, TypeVar

from scheduler_core import fenwick
from scheduler_core.accounting import Allocatable
from scheduler_core.cluster import ClusterState
from scheduler_core.memo import LastRun, Memoized, SlotKey, SnapshotMemo, StageOutcomes, same_objects
from scheduler_core.outcomes import RunsPart
from scheduler_core.workers import Gpu, WorkerView

_T = TypeVar("_T")
_D = TypeVar("_D")
_R = TypeVar("_R")
_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")
_I = TypeVar("_I", bound=Hashable, contravariant=True)
_O = TypeVar("_O")
_P = TypeVar("_P")
_P_co = TypeVar("_P_co", covariant=True)

#: A worker's memo entry: the view and instance generation its values were computed
#: for, and the values by key.
_MemoEntry = tuple[WorkerView, int, dict[object, object]]
#: A stage entry: the worker copy and instance generation an outcome was computed from.
_StageEntry = tuple[WorkerView, int, object]


class WorkerRule(Protocol[_I, _O, _P_co]):
    """A per-worker rule of a strategy, in two pure steps.

    ``evaluate`` must read nothing but its arguments: ``inputs`` (a hashable
    value holding every decision input the rule uses: its signature), the
    worker's GPUs of the stage's type and their allocatable memory; so one
    outcome serves every worker of the same shape. ``attach`` turns that
    outcome into the worker's own result (its candidates), reading only the
    inputs, the worker and the outcome; so the result can be kept across
    decisions while the worker is unchanged. ``reads_reported`` says whether
    ``evaluate`` reads what a GPU reports of itself beyond its size (vendor,
    memory in use); workers that differ only there then do not share an outcome.
    """

    name: str
    reads_reported: bool

    def evaluate(self, inputs: _I, gpus: tuple[Gpu, ...], allocatable: Allocatable) -> _O:
        """The rule's outcome for one worker shape."""
        ...

    def attach(self, inputs: _I, worker: WorkerView, outcome: _O) -> _P_co:
        """The worker's result from its shape's outcome."""
        ...


class StageRunner:
    """Maps per-worker rules over workers for one decision, sharing equal evaluations.

    Workers with equal GPUs (index, type, vendor, total, reported usage) and
    equal allocatable memory get one evaluation. With a memo, an unchanged
    worker's outcome is reused from an earlier decision with the same rule
    inputs and GPU type.
    """

    __slots__ = ("_cluster", "_functions", "_memo", "_shapes", "_shared")

    def __init__(self, cluster: ClusterState, memo: SnapshotMemo | None = None) -> None:
        self._cluster = cluster
        self._memo = memo
        self._shared: dict[tuple[str, str | None], tuple[object, dict[object, object]]] = {}
        self._shapes: dict[tuple[int, str | None, bool], tuple[WorkerView, Hashable]] = {}
        self._functions: dict[tuple[SlotKey, Hashable], Memoized[Any, Any]] = {}

    def tally(
        self, slot: SlotKey, values: Sequence[_T], items: Callable[[_T], Iterable[_K]]
    ) -> Mapping[_K, int]:
        """How often each of ``items(value)`` occurs over ``values``; with a memo, the last
        count under ``slot`` updated by the values that changed (:meth:`SnapshotMemo.tally`).

        ``items`` must be a pure function of the value; ``slot`` names it and whatever the
        values depend on.
        """
        memo = self._memo
        if memo is None:
            return Counter(chain.from_iterable(map(items, values)))
        return memo.tally(slot, values, items)

    def memoized(self, slot: SlotKey, signature: Hashable, compute: Callable[[_K], _V]) -> Memoized[_K, _V]:
        """One :class:`Memoized` per name and signature for this decision (every strategy gets
        the same), taken from the memo when there is one.

        ``compute`` must be a pure function of ``signature`` and its argument.
        """
        key = (slot, signature)
        found = self._functions.get(key)
        if found is None:
            memo = self._memo
            found = Memoized(signature, compute) if memo is None else memo.memoized(slot, signature, compute)
            self._functions[key] = found
        return found

    def run(
        self,
        rule: WorkerRule[_I, _O, _P],
        inputs: _I,
        gpu_type: str | None,
        workers: Iterable[WorkerView],
    ) -> list[tuple[WorkerView, _P]]:
        """Each worker's result of ``rule`` (``evaluate`` on its shape, then ``attach``), in order."""
        memo = self._memo
        if memo is None:
            return [(worker, self._result(rule, inputs, gpu_type, worker)) for worker in workers]
        table = memo.stage_outcomes((rule.name, inputs, gpu_type))
        if isinstance(workers, Sequence):
            patched = self._patched(rule, inputs, gpu_type, workers, table, memo)
            if patched is not None:
                return patched  # type: ignore[return-value]
        entries, generations = table.entries, memo.generations
        shapes = _shapes(table)
        results: list[tuple[WorkerView, _P]] = []
        for worker in workers:
            generation = generations.get(worker.id, 0)
            entry = entries.get(worker.id)
            if entry is not None and entry[0] is worker and entry[1] == generation:
                result: _P = entry[2]  # type: ignore[assignment]
            else:
                result = self._result(rule, inputs, gpu_type, worker, shapes)
                entries[worker.id] = (worker, generation, result)
            results.append((worker, result))
        if isinstance(workers, Sequence):
            table.last = LastRun(workers, results, memo.journal_mark())  # type: ignore[arg-type]
        return results

    #: Changed workers beyond which a run walks every worker instead of patching the last run.
    PATCH_LIMIT = 256

    def _patched(
        self,
        rule: WorkerRule[_I, _O, _P],
        inputs: _I,
        gpu_type: str | None,
        workers: Sequence[WorkerView],
        table: StageOutcomes,
        memo: SnapshotMemo,
    ) -> list[tuple[WorkerView, object]] | None:
        """The last run over the very same workers, with the workers whose generation changed
        since evaluated again; None when there is no such run (or too much changed)."""
        last = table.last
        if last is None or last.positions is None:
            return None
        if not (last.workers is workers or same_objects(last.workers, workers)):
            return None
        changed = memo.changed_since(last.mark)
        if changed is None or len(changed) > self.PATCH_LIMIT:
            return None
        results = last.results  # patched in place: the run's users follow its version (LastRun)
        positions = last.positions
        entries, generations = table.entries, memo.generations
        shapes = _shapes(table)
        evaluated: list[int] = []
        for worker_id in sorted(set(changed)):
            position = positions.get(worker_id)
            if position is None:  # not among these workers
                continue
            worker = results[position][0]
            generation = generations.get(worker_id, 0)
            result = self._result(rule, inputs, gpu_type, worker, shapes)
            entries[worker_id] = (worker, generation, result)
            results[position] = (worker, result)
            evaluated.append(position)
        if evaluated:
            for getters, lists in last.columns.items():
                _patch_columns(lists, getters, results, evaluated)
            last.patched(evaluated)
        last.mark = memo.journal_mark()
        return results

    def columns(
        self,
        rule: WorkerRule[_I, _O, _P],
        inputs: _I,
        gpu_type: str | None,
        workers: Sequence[WorkerView],
        getters: Getters,
    ) -> Columns:
        """:meth:`run`, and per getter the list of its value of each worker's result, in order.

        With a memo the lists are kept with the run (:class:`~scheduler_core.memo.LastRun`)
        and patched with it, where it was patched (a booking: one worker's entry), not read
        off every result again; the returned :attr:`Columns.run` and :attr:`Columns.version`
        say which kept run and which of its versions they are. Read the lists, never change
        them, and only during this decision (the next patch rewrites them). ``getters`` must be
        pure functions of a result (module constants: they key the kept lists).
        """
        results = self.run(rule, inputs, gpu_type, workers)
        memo = self._memo
        last = None if memo is None else memo.stage_outcomes((rule.name, inputs, gpu_type)).last
        if last is None or last.results is not results:
            return Columns(results, _read_columns(results, getters), None, 0)
        kept = last.columns.get(getters)
        if kept is None:
            kept = last.columns[getters] = _read_columns(results, getters)
        return Columns(results, kept, last, last.version)

    def subset(
        self, slot: SlotKey, workers: Sequence[WorkerView], keep: Callable[[WorkerView], bool]
    ) -> Sequence[WorkerView]:
        """The workers ``keep`` accepts, in order. With a memo, the same list object while
        ``workers`` holds the same objects (a rule run over it can then be patched).

        ``keep`` must be a pure function of the worker; ``slot`` names it and the list.
        """
        memo = self._memo
        if memo is None:
            return [worker for worker in workers if keep(worker)]
        kept = SlotKey("subset", slot)
        return memo.derived(kept, workers, lambda: tuple(filter(keep, workers)))

    def _result(
        self,
        rule: WorkerRule[_I, _O, _P],
        inputs: _I,
        gpu_type: str | None,
        worker: WorkerView,
        shapes: dict[object, object] | None = None,
    ) -> _P:
        """The worker's result; its shape's outcome taken from ``shapes`` (the memo's, kept
        across decisions) or from this decision's table."""
        free = self._cluster.allocatable(worker, gpu_type)
        shape = self._shape(worker, gpu_type, free, rule.reads_reported)
        table = shapes if shapes is not None else self._table(rule.name, inputs, gpu_type)
        outcome = table.get(shape)
        if outcome is None:
            outcome = table[shape] = rule.evaluate(inputs, worker.gpus, free)
        return rule.attach(inputs, worker, outcome)  # type: ignore[arg-type]

    def _shape(
        self, worker: WorkerView, gpu_type: str | None, free: Allocatable, reported: bool
    ) -> Hashable:
        """What a rule may read of the worker, once per decision: its GPUs and their
        allocatable memory, plus what the GPUs report of themselves (vendor, memory in use)
        for a rule that reads it. Leaving that out for the rules that do not read it lets
        workers that differ only in reported usage share one evaluation."""
        key = (worker.id, gpu_type, reported)
        known = self._shapes.get(key)
        if known is None or known[0] is not worker:
            # kept across decisions too: a request shape never decided before reads every
            # worker's shape, which depends on the worker and its instances only
            shape = self._cluster.per_own_worker(
                worker, ("stage_shape", gpu_type, reported), lambda: _shape_of(worker, free, reported)
            )
            known = self._shapes[key] = (worker, shape)
        return known[1]

    def _table(self, name: str, inputs: object, gpu_type: str | None) -> dict[object, object]:
        """The decision's outcomes of one rule and GPU type by worker shape, for these inputs."""
        key = (name, gpu_type)
        known = self._shared.get(key)
        if known is None or (known[0] is not inputs and known[0] != inputs):
            known = self._shared[key] = (inputs, {})
        return known[1]


def _shape_of(worker: WorkerView, free: Allocatable, reported: bool) -> Hashable:
    """:meth:`StageRunner._shape`'s value: the allocatable RAM and, per GPU, its index, type,
    total and allocatable VRAM (and vendor and memory in use when ``reported``)."""
    vram = free.vram
    sizes = [(g.index, g.type, g.total, 0 if g.index is None else vram.get(g.index, 0)) for g in worker.gpus]
    gpus: tuple[tuple[object, ...], ...] = (
        tuple((*size, g.vendor, g.used) for size, g in zip(sizes, worker.gpus, strict=True))
        if reported
        else tuple(sizes)
    )
    return (free.ram, gpus)


def _shapes(table: StageOutcomes) -> dict[object, object]:
    """The stage table's outcomes by worker shape (started over when it grew past its bound)."""
    if len(table.shapes) >= StageOutcomes.SHAPES:
        table.shapes.clear()
    return table.shapes


_RESULT = operator.itemgetter(1)
#: What :meth:`StageRunner.columns` reads off each result (its ``getters``).
Getters = tuple[Callable[[Any], Any], ...]


def _read_columns(results: Sequence[tuple[WorkerView, Any]], getters: Getters) -> tuple[list[Any], ...]:
    outcomes = list(map(_RESULT, results))  # at C speed: thousands of workers
    return tuple(list(map(getter, outcomes)) for getter in getters)


def _patch_columns(
    lists: tuple[list[Any], ...], getters: Getters, results: list[Any], positions: list[int]
) -> None:
    """Rewrite the columns at ``positions`` from the results there."""
    for position in positions:
        result = results[position][1]
        for column, getter in zip(lists, getters, strict=True):
            column[position] = getter(result)


@dataclass(frozen=True, slots=True)
class Columns:
    """What :meth:`StageRunner.columns` gives: the run's results, the lists read off them, and
    (with a memo) the kept run they belong to and its version (None and 0 without one)."""

    results: list[tuple[WorkerView, Any]]
    lists: tuple[list[Any], ...]
    run: LastRun | None
    version: int

    def derived(self, key: Hashable, build: Callable[[], _D], patch: Callable[[_D, list[int]], bool]) -> _D:
        """``build()``, something derived from these lists and results, kept with the run.

        Kept with a memo, it is brought up to date by ``patch(state, positions)`` with the
        positions the run was patched at since it was last handed out (``patch`` changes
        ``state`` in place and returns False when it cannot: then it is built again); when
        the run has not changed since, it is handed out as it is. Both must read nothing but
        these lists and results and what ``key`` names (so every other input of theirs is part
        of ``key``); the state is the run's: use it during this decision only.
        """
        run = self.run
        if run is None:
            return build()
        entry = run.kept.get(key)
        if entry is not None:
            version, state = entry
            changed = run.changed_since(version)
            if changed is not None and (not changed or patch(state, changed)):
                run.kept[key] = (run.version, state)
                return state  # type: ignore[no-any-return]
        state = build()
        run.kept[key] = (run.version, state)
        return state


def none_positions(columns: Columns, column: int, *, none: bool = True) -> list[int]:
    """The positions whose value in ``columns.lists[column]`` is None (``none``) or is not,
    ascending, kept with the run: a patch moves only the patched positions in or out."""
    values: list[Any] = columns.lists[column]
    test = operator.is_ if none else operator.is_not

    def build() -> list[int]:
        return list(compress(count(), map(test, values, repeat(None))))

    def patch(positions: list[int], changed: list[int]) -> bool:
        for position in changed:
            at = bisect_left(positions, position)
            listed = at < len(positions) and positions[at] == position
            wanted = (values[position] is None) == none
            if wanted and not listed:
                positions.insert(at, position)
            elif listed and not wanted:
                del positions[at]
        return True

    return columns.derived(("none_positions", column, none), build, patch)


def joined(columns: Columns, runs: list[Sequence[_T]]) -> RunsPart[_T] | None:
    """``runs`` (a column of ``columns``: one worker's run each) as a part of a
    :class:`~scheduler_core.outcomes.JoinedRuns`, with the Fenwick tree of their lengths kept
    with the run; None without a memo (then a plain tuple joins them faster)."""
    if columns.run is None:
        return None

    def build() -> list[Any]:
        lengths = list(map(len, runs))
        return [lengths, fenwick.build(lengths), sum(lengths)]

    def patch(state: list[Any], positions: list[int]) -> bool:
        lengths, tree = state[0], state[1]
        for position in positions:
            length = len(runs[position])
            grown = length - lengths[position]
            if grown:
                fenwick.add(tree, position, grown)
                lengths[position] = length
                state[2] += grown
        return True

    state = columns.derived(("joined", id(runs)), build, patch)
    return RunsPart(tuple(runs), list(state[1]), state[2])


class Rule(Generic[_I, _O, _P]):
    """Adapts two pure module-level functions to :class:`WorkerRule` (with a name for reuse tables)."""

    __slots__ = ("_attach", "_evaluate", "name", "reads_reported")

    def __init__(
        self,
        name: str,
        evaluate: Callable[[_I, tuple[Gpu, ...], Allocatable], _O],
        attach: Callable[[_I, WorkerView, _O], _P],
        *,
        reads_reported: bool,
    ) -> None:
        self.name = name
        self._evaluate = evaluate
        self._attach = attach
        self.reads_reported = reads_reported

    def evaluate(self, inputs: _I, gpus: tuple[Gpu, ...], allocatable: Allocatable) -> _O:
        """Call the evaluating function."""
        return self._evaluate(inputs, gpus, allocatable)

    def attach(self, inputs: _I, worker: WorkerView, outcome: _O) -> _P:
        """Call the attaching function."""
        return self._attach(inputs, worker, outcome)
