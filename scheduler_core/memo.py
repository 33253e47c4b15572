"""What a long-lived decider keeps across ``schedule()`` calls: the memo (no rule knows of it).

:class:`SnapshotMemo` keeps validated worker views, orderings and groupings
derived from a worker list, per-worker values (allocatable memory, spread
loads) and per-worker stage outcomes, each valid only while the objects it
was computed from are the same objects; values per item of a worker (a
candidate's spread score, :meth:`SnapshotMemo.item_values`), dropped when
their worker's instances change; which items of a growing list already
passed a check (:meth:`SnapshotMemo.first_failure`). :class:`Memoized` wraps
a pure function of a hashable argument a rule needs many times with few
distinct arguments. What is kept is named by a typed :class:`SlotKey`, never a
bare string. The runner that maps rules over workers with it is
:mod:`scheduler_core.caching`.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, compress, count, filterfalse
from typing import Any, Generic, TypeVar

from scheduler_core._schemas import ModelInstance
from scheduler_core.accounting import holdings, occupied_workers
from scheduler_core.cluster import InstanceIndex, index_instances
from scheduler_core.workers import WorkerView

_T = TypeVar("_T")
_R = TypeVar("_R")
_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")

#: A worker's memo entry: the view and instance generation its values were computed
#: for, and the values by key.
_MemoEntry = tuple[WorkerView, int, dict[object, object]]
#: A stage entry: the worker copy and instance generation an outcome was computed from.
_StageEntry = tuple[WorkerView, int, object]


@dataclass(frozen=True, slots=True)
class SlotKey:
    """The name of something the memo keeps (typed: a name and what else it depends on).

    ``name`` says what is kept; ``part`` carries the other inputs it depends on (a GPU
    type), so ``SlotKey("fraction_inputs", "cuda")`` and ``SlotKey("fraction_inputs", "rocm")``
    are kept apart. Modules declare their slots as constants and qualify them with
    :meth:`of`.
    """

    name: str
    part: Hashable = None

    def of(self, part: Hashable) -> SlotKey:
        """This slot for ``part``."""
        return SlotKey(self.name, part)


#: :meth:`SnapshotMemo.by_id`'s slot.
_BY_ID = SlotKey("views_by_id")


class Extended(tuple[object, ...]):
    """A tuple that starts with the very items of :attr:`base`, in order (made by
    :func:`extended`, which is the only way it gets one)."""

    base: tuple[object, ...] | None = None


def extended(base: tuple[_T, ...], added: Iterable[_T]) -> tuple[_T, ...]:
    """``base`` with ``added`` appended, as a tuple that says it extends ``base``.

    A memo that last saw ``base`` compares the new tuple with it in one identity test
    instead of item by item: a booking appends one instance to thousands, decision after
    decision. ``base``'s own link back is dropped, so the tuples before it are not kept
    alive (one link is what a memo that sees every tuple needs; without it, the items
    are compared one by one, with the same answer).
    """
    made = Extended(base + tuple(added))  # two copies of the items, not three: a list, a tuple, then ours
    made.base = base
    if isinstance(base, Extended):
        base.base = None
    return made  # type: ignore[return-value]


def _extends(longer: Sequence[object], prefix: Sequence[object]) -> bool:
    """True when ``longer`` starts with the very objects of ``prefix``, in order."""
    if longer is prefix or (isinstance(longer, Extended) and longer.base is prefix):
        return True
    return len(longer) >= len(prefix) and all(map(operator.is_, prefix, longer))


def same_objects(first: Sequence[object], second: Sequence[object]) -> bool:
    """True when both sequences hold the very same objects in the same order (at once when
    both are one tuple: the memo keeps tuples as given, so a tuple handed on stays itself)."""
    return first is second or (len(first) == len(second) and all(map(operator.is_, first, second)))


def frozen(items: Sequence[_T]) -> tuple[_T, ...]:
    """``items`` as a tuple: itself when it is one (then :func:`same_objects` is one identity test)."""
    return items if isinstance(items, tuple) else tuple(items)


class StageOutcomes:
    """One rule's per-worker outcomes for one set of inputs and GPU type.

    ``entries`` maps a worker id to ``(worker copy, generation, outcome)``; an
    outcome is valid while the copy is the same object and the worker's
    generation in :attr:`SnapshotMemo.generations` is unchanged. ``shapes`` maps a
    worker shape (its GPUs and allocatable memory, what the rule's pure ``evaluate``
    reads) to the rule's outcome, valid for as long as the table (the same rule and inputs).
    """

    __slots__ = ("entries", "last", "shapes")

    #: Outcomes by worker shape kept at most; beyond it the table starts over.
    SHAPES = 4096

    def __init__(self) -> None:
        self.entries: dict[int, _StageEntry] = {}
        #: The last full run: the workers it ran over, their results and the memo's journal mark.
        self.last: LastRun | None = None
        #: The rule's outcome per worker shape (what ``evaluate`` reads), across decisions.
        self.shapes: dict[object, object] = {}


class LastRun:
    """One run of a rule over a worker sequence, kept so that the next run over the same
    workers only evaluates the workers whose instances changed since (the journal).

    A later run over the same workers *patches* this one in place: ``results`` and every
    list of ``columns`` (per tuple of getters, one list per getter read off the results,
    in worker order, that a stage asked for) are rewritten at the positions evaluated
    again, ``version`` counts the patches that changed something and ``log`` says which
    positions each changed (the last :data:`LOG` of them), so whoever kept something
    derived from the run at an earlier version can bring it up to date from the changed
    positions alone (:meth:`changed_since`), in ``kept`` or elsewhere. ``kept`` is the
    users' room for such derived state; it lives and dies with the run.
    """

    __slots__ = ("columns", "kept", "log", "mark", "positions", "results", "version", "workers")

    #: Patches whose positions the log keeps.
    LOG = 64

    def __init__(
        self,
        workers: Sequence[WorkerView],
        results: list[tuple[WorkerView, object]],
        mark: tuple[int, int],
        positions: dict[int, int] | None = None,
    ) -> None:
        self.workers = workers
        self.results = results
        self.mark = mark
        #: Each worker's position (None: a worker id listed twice, so no patching).
        self.positions = positions if positions is not None else _positions(workers)
        self.columns: dict[tuple[Callable[[Any], Any], ...], tuple[list[Any], ...]] = {}
        self.version = 0
        self.log: list[tuple[int, list[int]]] = []
        self.kept: dict[Hashable, Any] = {}

    def patched(self, positions: list[int]) -> None:
        """Note a patch that rewrote ``positions`` (a new version, logged)."""
        self.version += 1
        log = self.log
        log.append((self.version, positions))
        if len(log) > self.LOG:
            del log[: len(log) - self.LOG]

    def changed_since(self, version: int) -> list[int] | None:
        """The positions rewritten after ``version`` (ascending, once each); None when the log
        no longer reaches back that far."""
        if version == self.version:
            return []
        log = self.log
        if version > self.version or not log or log[0][0] > version + 1:
            return None
        changed: set[int] = set()
        for patched, positions in reversed(log):
            if patched <= version:
                break
            changed.update(positions)
        return sorted(changed)


def _positions(workers: Sequence[WorkerView]) -> dict[int, int] | None:
    positions = {worker.id: position for position, worker in enumerate(workers)}
    return positions if len(positions) == len(workers) else None


_MODEL_ID = operator.attrgetter("model_id")
_NO_HOSTS: Counter[int] = Counter()


def _add_hosts(hosts: dict[int | None, Counter[int]], instances: Iterable[ModelInstance]) -> None:
    """Count each instance at the workers it is bound to (as :func:`index_instances` binds it)."""
    for instance in instances:
        bound = hosts.get(instance.model_id)
        if bound is None:
            bound = hosts[instance.model_id] = Counter()
        bound.update({worker_id for worker_id, _ in holdings(instance)})  # each worker once


class Memoized(Generic[_K, _V]):
    """``compute(argument)``, evaluated at most once per argument while this object lives.

    ``compute`` must be a pure function of ``signature`` (whatever else it reads,
    fixed when the object is made) and of its argument. Two objects are equal (and
    hash alike) when their signatures are: that lets a rule carry one in its
    hashable inputs without changing what the inputs mean. Not thread-safe.
    """

    __slots__ = ("_compute", "_hash", "_values", "signature")

    #: Values kept at most; beyond it the table starts over.
    LIMIT = 4096

    def __init__(self, signature: Hashable, compute: Callable[[_K], _V]) -> None:
        self.signature = signature
        self._compute = compute
        self._values: dict[_K, _V] = {}
        self._hash = hash(signature)

    def __call__(self, argument: _K) -> _V:
        """The value for ``argument`` (computed on first use)."""
        values = self._values
        if argument in values:
            return values[argument]
        value = self._compute(argument)
        if len(values) >= self.LIMIT:
            values.clear()
        values[argument] = value
        return value

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, Memoized) and self.signature == other.signature)

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Memoized({self.signature!r})"


class _Kept:
    """Values computed from workers' states, for :meth:`SnapshotMemo.worker_values` and
    :meth:`SnapshotMemo.item_values`: each value belongs to one worker and is dropped when
    that worker's generation changes (the journal); all are dropped when the worker views do.

    ``values`` is keyed by worker id, or by an item's identity (then ``items`` keeps the
    item alive, so its id stays its own, and ``by_worker`` lists each worker's keys).
    """

    __slots__ = ("by_worker", "items", "mark", "values", "views")

    def __init__(self, views: Sequence[WorkerView], mark: tuple[int, int]) -> None:
        self.values: dict[int, object] = {}
        self.items: dict[int, object] = {}
        self.by_worker: dict[int, list[int]] = {}
        self.views = frozen(views)
        self.mark = mark

    def clear(self) -> None:
        self.values.clear()
        self.items.clear()
        self.by_worker.clear()

    def drop(self, worker_id: int) -> None:
        """Forget what belongs to the worker."""
        self.values.pop(worker_id, None)
        for key in self.by_worker.pop(worker_id, ()):
            self.values.pop(key, None)
            self.items.pop(key, None)


class SnapshotMemo:
    """State remembered *across* decisions on a slowly changing cluster.

    Holds three kinds of entries, each reused only while the objects it was
    computed from are the very same objects (the memo keeps references, so
    identities cannot be recycled):

    * per-worker values (allocatable resources per GPU type, spread counts),
      valid while the worker view is the same object and no instance bound to
      the worker changed: each new instance list is compared with the previous
      one, and every worker an added or removed instance occupies gets a new
      *generation*;
    * values derived from a whole worker list (validated views, GPU-type
      grouping, fraction inputs), valid while the list holds the same objects
      in the same order;
    * per-worker rule outcomes, keyed by the rule, its inputs and the GPU type,
      valid while the worker copy is the same object and the worker's
      generation is unchanged;
    * :class:`Memoized` functions by name and signature (valid for as long as
      the signature is equal: they read nothing else).

    Not thread-safe: one per thread.
    """

    __slots__ = (
        "_derived", "_entries", "_era", "_functions", "_hosts", "_ids", "_index", "_instances", "_journal",
        "_kept", "_kept_weight", "_models", "_objects", "_passed", "_stages", "_tallies", "_views",
        "generations",
    )

    #: Entries kept at most per kind; beyond it that kind starts over (workers come and go).
    LIMIT = 200_000
    #: Stage tables kept at most (one per rule, distinct inputs and GPU type; the least
    #: recently used goes).
    STAGE_TABLES = 512
    #: Worker entries kept at most over all stage tables (the least recently used tables go
    #: first): each request shape a decider sees keeps a table of up to one entry per worker,
    #: so a count of tables alone let memory grow with the cluster's size (512 tables at
    #: 2,000 × 8 are a million entries; one-GPU shapes keep about 2.9 KB per entry there).
    STAGE_ENTRIES = 300_000
    #: Memoized functions kept at most (each holds up to :attr:`Memoized.LIMIT` values).
    FUNCTIONS = 32
    #: Generation changes the journal holds before it starts over.
    JOURNAL = 100_000
    #: Tables of values per worker or per item kept at most (the least recently used goes).
    KEPT_TABLES = 8
    #: Objects of :meth:`kept` kept at most (the least recently used goes): a spread ranking
    #: per request shape and stage, so a decider serving many model sizes keeps them
    #: (128 shapes in turn at 2,000 × 8: 16 made each repeated shape's decision rebuild its
    #: ranking, p50 7.6–8.0 ms against 1.8–1.9 ms; 64 cost 24 MB more there).
    KEPT_OBJECTS = 64
    #: The weights of :meth:`kept`'s objects held at most (the least recently used go first):
    #: a spread ranking weighs its slots plus its candidates (about 100 bytes each), so the
    #: rankings' memory is bounded on any cluster, not only by their count: about 200 MB.
    #: A one-GPU shape's ranking weighs about 9,000 at 2,000 × 8 (1 MB: 64 of them fit) and
    #: 89,000 at 10,000 × 8 with 20,000 small instances (22 fit). Shapes asked in turn that
    #: do not fit are each decided in a full pass (least recently used: none is found again),
    #: so the bound is a guard against memory growing with the cluster, not a cache size to
    #: tune down (600,000 made 10 one-GPU shapes in turn at 10,000 × 8 cost p50 94 ms
    #: instead of 1.6 ms).
    KEPT_WEIGHT = 2_000_000

    def __init__(self) -> None:
        #: Per slot, the values of the last :meth:`tally` and their counts.
        self._tallies: dict[SlotKey, tuple[tuple[Any, ...], Counter[Any]]] = {}
        self._entries: dict[int, _MemoEntry] = {}
        self._instances: tuple[ModelInstance, ...] = ()
        #: The index of :attr:`_instances` and their identities (None: not kept).
        self._index: InstanceIndex | None = None
        self._ids: set[int] | None = set()
        #: Instances of :attr:`_instances` per model id.
        self._models: Counter[int | None] = Counter()
        #: Per model id, the workers its instances are bound to (and how many of them each).
        self._hosts: dict[int | None, Counter[int]] = {}
        self._derived: dict[SlotKey, tuple[tuple[object, ...], object]] = {}
        self._stages: dict[tuple[object, ...], StageOutcomes] = {}
        #: Views of worker rows by row identity (the row is kept, so its id stays its own).
        self._views: dict[int, tuple[object, WorkerView]] = {}
        self._functions: dict[tuple[SlotKey, Hashable], Memoized[Any, Any]] = {}
        #: Per check, the last sequence every item of which passed it (see :meth:`first_failure`).
        self._passed: dict[SlotKey, tuple[object, ...]] = {}
        #: Per worker id, how many times its bound instances changed (absent: never).
        self.generations: dict[int, int] = {}
        #: The worker ids whose generation changed, in order; ``_era`` counts the times it
        #: started over (every generation forgotten, or the journal grown past its limit).
        self._journal: list[int] = []
        self._era = 0
        #: Tables of :meth:`worker_values` and :meth:`item_values`, least recently used first.
        self._kept: dict[Hashable, _Kept] = {}
        #: Objects of :meth:`kept` and the items each follows, least recently used first.
        #: Per slot of :meth:`kept`: its items, its object and the object's weight.
        self._objects: dict[Hashable, tuple[tuple[object, ...], object, int]] = {}
        #: The weights of :attr:`_objects` summed.
        self._kept_weight = 0

    def track_instances(self, instances: tuple[ModelInstance, ...]) -> InstanceIndex | None:
        """Give every worker whose bound instances changed a new generation; return the
        instances' :func:`~scheduler_core.cluster.index_instances`.

        Compares ``instances`` with the list of the previous call by identity
        (per-worker values do not depend on instance order). When the new list
        is the previous one with instances appended (a booking), only those are
        indexed and compared; otherwise the index is built again.
        """
        previous, self._instances = self._instances, instances
        if previous is instances:
            return self._index
        if self._index is not None and self._ids is not None and _extends(instances, previous):
            added = instances[len(previous) :]
            if self._note_added(added):
                index_instances(added, self._index)
                self._models.update(map(_MODEL_ID, added))
                _add_hosts(self._hosts, added)
                return self._index
        self._index = index_instances(instances)
        self._models = Counter(map(_MODEL_ID, instances))
        self._hosts = {}
        _add_hosts(self._hosts, instances)
        self._rediff(previous, instances)
        return self._index

    def by_id(self, views: Sequence[WorkerView]) -> Mapping[int, WorkerView]:
        """``views`` by worker id, kept while they are the same objects (read it, never change it)."""
        return self.derived(_BY_ID, views, lambda: {view.id: view for view in views})

    def running_models(self) -> Mapping[int | None, int]:
        """Instances per model id among the instances of the last :meth:`track_instances`."""
        return self._models

    def model_hosts(self, model_id: int | None) -> Collection[int]:
        """The workers the instances of ``model_id`` are bound to (main or subordinate), among
        the instances of the last :meth:`track_instances` (read it, never change it)."""
        return self._hosts.get(model_id, _NO_HOSTS).keys()

    def _note_added(self, added: tuple[ModelInstance, ...]) -> bool:
        """Bump the generations of the workers ``added`` occupies; False for an object listed twice."""
        ids = self._ids
        assert ids is not None
        touched: set[int] = set()
        for instance in added:
            if id(instance) in ids:
                return False
            ids.add(id(instance))
            touched.update(occupied_workers(instance))
        self._bump(touched)
        return True

    def _rediff(self, previous: tuple[ModelInstance, ...], instances: tuple[ModelInstance, ...]) -> None:
        before = {id(instance) for instance in previous}
        after = {id(instance) for instance in instances}
        if len(before) != len(previous) or len(after) != len(instances):
            self._ids = None
            self._forget_workers()  # an instance object listed twice: no cheap diff
            return
        self._ids = after
        touched: set[int] = set()
        for instance in previous:
            if id(instance) not in after:
                touched.update(occupied_workers(instance))
        for instance in instances:
            if id(instance) not in before:
                touched.update(occupied_workers(instance))
        self._bump(touched)

    def _bump(self, worker_ids: Iterable[int]) -> None:
        """A new generation for each worker, noted in the journal."""
        generations, journal = self.generations, self._journal
        for worker_id in worker_ids:
            generations[worker_id] = generations.get(worker_id, 0) + 1
            journal.append(worker_id)
        if len(journal) > self.JOURNAL:
            journal.clear()
            self._era += 1

    def _forget_workers(self) -> None:
        self._entries.clear()
        self._stages.clear()
        self._kept.clear()
        self._objects.clear()
        self._kept_weight = 0
        self.generations.clear()
        self._journal.clear()
        self._era += 1

    def journal_mark(self) -> tuple[int, int]:
        """Where the journal stands now (for :meth:`changed_since`)."""
        return self._era, len(self._journal)

    def changed_since(self, mark: tuple[int, int]) -> Sequence[int] | None:
        """The ids of the workers whose generation changed since ``mark`` (repeats possible),
        None when that is no longer known (the journal started over)."""
        era, position = mark
        if era != self._era:
            return None
        return self._journal[position:]

    def get(self, worker_id: int, key: object, view: WorkerView) -> object | None:
        """A per-worker value while ``view`` and the worker's generation are unchanged, else None."""
        entry = self._entries.get(worker_id)
        if entry is None or entry[0] is not view or entry[1] != self.generations.get(worker_id, 0):
            return None
        return entry[2].get(key)

    def put(self, worker_id: int, key: object, view: WorkerView, value: object) -> None:
        """Remember a per-worker value for this exact view and the current generation."""
        generation = self.generations.get(worker_id, 0)
        entry = self._entries.get(worker_id)
        if entry is None or entry[0] is not view or entry[1] != generation:
            if len(self._entries) >= self.LIMIT:
                self._entries.clear()
            entry = self._entries[worker_id] = (view, generation, {})
        entry[2][key] = value

    def worker_values(
        self,
        slot: Hashable,
        views: Sequence[WorkerView],
        worker_ids: Sequence[int],
        compute: Callable[[int], _T],
    ) -> dict[int, _T]:
        """``compute(worker_id)`` for each of ``worker_ids``, kept across decisions.

        ``compute`` must be a pure function of the worker's view (in ``views``) and of
        the instances bound to it; ``slot`` names it. A value is computed again after
        the worker's instances change, every value after ``views`` does.
        """
        table = self._kept_table(SlotKey("workers", slot), views)
        values = table.values
        for worker_id in filterfalse(values.__contains__, worker_ids):
            values[worker_id] = compute(worker_id)
        return dict(zip(worker_ids, map(values.__getitem__, worker_ids), strict=True))  # type: ignore[arg-type]

    def item_values(
        self,
        slot: Hashable,
        views: Sequence[WorkerView],
        items: Sequence[_T],
        worker_of: Callable[[_T], int],
        compute: Callable[[Sequence[_T]], list[_V]],
    ) -> list[_V]:
        """``compute(items)``, with the value of every item seen before (the very same object)
        taken from earlier decisions and ``compute`` run on the others only.

        ``compute`` must give each item's value (never None) as a pure function of the
        item, of the view and bound instances of the worker ``worker_of(item)``, and of
        constants ``slot`` names; whatever other items it is given with.
        """
        table = self._kept_table(SlotKey("items", slot), views)
        values = table.values
        found: list[Any] = list(map(values.get, map(id, items)))
        if None not in found:
            return found
        missing = [position for position, value in enumerate(found) if value is None]
        if len(values) + len(missing) > self.LIMIT:
            table.clear()
        fresh = [items[position] for position in missing]
        for position, item, value in zip(missing, fresh, compute(fresh), strict=True):
            found[position] = value
            key = id(item)
            values[key] = value
            table.items[key] = item
            table.by_worker.setdefault(worker_of(item), []).append(key)
        return found

    def _kept_table(self, slot: SlotKey, views: Sequence[WorkerView]) -> _Kept:
        """The table of ``slot``, with what changed since its last use dropped."""
        kept = self._kept
        table = kept.pop(slot, None)
        if table is None:
            table = _Kept(views, self.journal_mark())
        elif not same_objects(table.views, views):
            table.clear()
            table.views = frozen(views)
        else:
            changed = self.changed_since(table.mark)
            if changed is None:
                table.clear()
            else:
                for worker_id in set(changed):
                    table.drop(worker_id)
        table.mark = self.journal_mark()
        if len(kept) >= self.KEPT_TABLES:
            del kept[next(iter(kept))]
        kept[slot] = table  # the most recently used last
        return table

    def view_of(self, row: _R, build: Callable[[_R], WorkerView]) -> WorkerView:
        """``build(row)``, kept while the (frozen) row is the same object: a worker row
        that did not change keeps its view when the worker list around it changes."""
        entry = self._views.get(id(row))
        if entry is not None and entry[0] is row:
            return entry[1]
        view = build(row)
        if len(self._views) >= self.LIMIT:
            self._views.clear()
        self._views[id(row)] = (row, view)
        return view

    def derived(self, slot: SlotKey, items: Sequence[object], compute: Callable[[], _T]) -> _T:
        """``compute()``, reused while ``items`` holds the same objects as when it ran.

        ``slot`` names what is derived; ``compute`` must be a pure function of
        ``items`` and of constants the slot captures. Exceptions propagate
        and nothing is remembered.
        """
        entry = self._derived.get(slot)
        if entry is not None and same_objects(entry[0], items):
            return entry[1]  # type: ignore[return-value]
        value = compute()
        if len(self._derived) >= 64:  # a handful of slots in use; stale ones go
            self._derived.clear()
        self._derived[slot] = (frozen(items), value)
        return value

    def kept(
        self, slot: Hashable, items: Sequence[object], build: Callable[[], _T], weight: int = 1
    ) -> _T:
        """One object per ``slot`` that its user updates decision after decision, kept while
        ``items`` holds the same objects (a new one from ``build`` otherwise).

        Unlike :meth:`derived`, the object is the user's to change: it must hold nothing but
        what ``slot`` and ``items`` determine, brought up to date by its user on every use.
        ``weight``: how much memory the object holds, in its user's unit (a ranking: its
        slots); the least recently used objects go while more than :data:`KEPT_OBJECTS` or a
        weight over :data:`KEPT_WEIGHT` are held (the object of this call stays, whatever
        its weight).
        """
        objects = self._objects
        entry = objects.pop(slot, None)
        if entry is not None:
            self._kept_weight -= entry[2]
        if entry is None or not same_objects(entry[0], items):
            entry = (frozen(items), build(), weight)
        elif entry[2] != weight:
            entry = (entry[0], entry[1], weight)
        limit = self.KEPT_WEIGHT - weight
        while objects and (len(objects) >= self.KEPT_OBJECTS or self._kept_weight > limit):
            self._kept_weight -= objects.pop(next(iter(objects)))[2]
        objects[slot] = entry  # the most recently used last
        self._kept_weight += weight
        return entry[1]  # type: ignore[return-value]

    def tally(self, slot: SlotKey, values: Sequence[_T], items: Callable[[_T], Iterable[_K]]) -> Counter[_K]:
        """How often each of ``items(value)`` occurs over ``values`` (read it, never change it).

        ``items`` must be a pure function of the (frozen) value; ``slot`` names it and
        whatever the values depend on. When ``values`` has as many positions as at the
        last call under ``slot`` and most hold the very same objects (a booking changes one
        worker's), only the positions that changed are counted again: out with the old
        value's items, in with the new one's.
        """
        kept = self._tallies.get(slot)
        if kept is not None and len(kept[0]) == len(values):
            previous, counts = kept
            changed = list(compress(count(), map(operator.is_not, values, previous)))
            if len(changed) <= len(values) // 4:
                for position in changed:
                    for item in items(previous[position]):
                        left = counts[item] - 1
                        if left:
                            counts[item] = left
                        else:
                            del counts[item]
                    counts.update(items(values[position]))
                self._tallies[slot] = (frozen(values), counts)
                return counts
        counts = Counter(chain.from_iterable(map(items, values)))
        if len(self._tallies) >= 64:  # a handful of slots in use; stale ones go
            self._tallies.clear()
        self._tallies[slot] = (frozen(values), counts)
        return counts

    def first_failure(self, check: SlotKey, items: Sequence[_T], passes: Callable[[_T], bool]) -> int | None:
        """The position of the first item that does not ``pass``, None when all do.

        ``passes`` must be a pure function of the (frozen) item, named by ``check``.
        When ``items`` starts with the very objects of the last sequence that
        passed entirely (a booking appends an instance), only the items after
        them are checked.
        """
        passed = self._passed.get(check, ())
        start = len(passed) if passed and _extends(items, passed) else 0
        for position in range(start, len(items)):
            if not passes(items[position]):
                return position
        if len(self._passed) >= 64:  # a handful of checks in use
            self._passed.clear()
        self._passed[check] = frozen(items)
        return None

    def memoized(self, slot: SlotKey, signature: Hashable, compute: Callable[[_K], _V]) -> Memoized[_K, _V]:
        """The remembered :class:`Memoized` of ``slot`` for an equal signature, else a new one."""
        key = (slot, signature)
        found = self._functions.get(key)
        if found is None:
            if len(self._functions) >= self.FUNCTIONS:
                self._functions.clear()
            found = self._functions[key] = Memoized(signature, compute)
        return found

    def stage_outcomes(self, key: tuple[object, ...]) -> StageOutcomes:
        """The per-worker outcome table of one rule (``key``: rule, inputs, GPU type).

        Kept in least-recently-used order: a new table first makes room under
        :attr:`STAGE_TABLES` and :attr:`STAGE_ENTRIES` (the tables used longest ago go).
        """
        stages = self._stages
        table = stages.pop(key, None)
        if table is None:
            table = StageOutcomes()
            self._make_room(stages)
        stages[key] = table  # the most recently used last
        return table

    def _make_room(self, stages: dict[tuple[object, ...], StageOutcomes]) -> None:
        while len(stages) >= self.STAGE_TABLES:
            del stages[next(iter(stages))]
        held = sum(len(table.entries) for table in stages.values())
        while stages and held > self.STAGE_ENTRIES:
            held -= len(stages.pop(next(iter(stages))).entries)
