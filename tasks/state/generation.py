"""The data generation: telling the Redis the service wrote from a wiped or rolled-back one.

A Redis restarted without its data (a lost volume, ``FLUSHALL``, a new
container) or from an older AOF/RDB, or a failover to a replica that lagged,
looks like a valid, smaller state: an empty or older cluster, fewer requests.
Deciding against it books GPUs that are already in use and parks what should
place. So every process remembers what it saw:

* the **generation**: ``gpusched:generation``, an id written once (``SET NX``)
  by the first process that finds none and knows none, and replaced only by a
  recovery (:mod:`tasks.flows.recovery`), whose record lists the generations it
  supersedes;
* the highest **cluster version** it read (the version only grows).

With replicas required (:mod:`tasks.state.replication`), both are what a
replica acknowledged, not merely what was read: a failover may take away a
write no replica had — a generation just created, a cluster change — but
that write was never acknowledged to anyone, so it is not a loss and must
not halt the service. A generation is remembered once a position of it is
stored, and the version compared is the highest acknowledged one.

:meth:`DataGeneration.check` reads the generation, the loss marker and the
version in one ``MGET`` and compares:

=============================  ==============================================
found                          verdict
=============================  ==============================================
the loss marker                ``halted`` (a loss was detected, not recovered)
nothing, nothing known         ``new`` (the generation is written: ``ok``)
no generation, one known       ``wiped``
another generation             ``recovered`` if it is a recovery superseding
                               the known one (or this process saw the loss
                               marker since), adopted; else ``replaced``
a version below the highest    ``rolled_back``
one read
=============================  ==============================================

A loss (``wiped``, ``replaced``, ``rolled_back``) is written once as the
marker ``gpusched:data_lost`` with a ``sched.data.lost`` event (one WATCH/MULTI
transaction: both or neither, only if no marker exists yet), and
logged (``data_lost``, level critical) by every process that detects it; from
then on every process finds ``halted`` until a recovery removes the marker.
Nothing decides, books or drains meanwhile
(:mod:`tasks.runtime.middleware.data_guard`), ``submit()`` refuses, the health
checks fail.

What a process remembers (:class:`GenerationMemory`): a worker process keeps
the generation id per partition, shared by its threads and inherited by its
forked pool processes, and, when ``generation_file`` is set, in that file too,
so a restarted worker still knows it; a client keeps its own. The version is
kept per runtime (per thread: reads on one thread are ordered, so the
versions it reads only grow unless Redis went back in time). A process that
knows nothing cannot tell a wiped Redis from a new one: it adopts what it finds.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from redis.client import Pipeline

from tasks.base.events import event_fields, utc_now_iso
from tasks.base.logging import get_logger
from tasks.state.partition import Partition
from tasks.state.replication import Position, Replication

log = get_logger(__name__)

Verdict = Literal["ok", "new", "recovered", "halted", "wiped", "replaced", "rolled_back"]
#: Verdicts under which the service keeps deciding.
HEALTHY: frozenset[str] = frozenset({"ok", "new", "recovered"})
#: Verdicts that are a fresh detection (the marker is written).
LOSSES: frozenset[str] = frozenset({"wiped", "replaced", "rolled_back"})

class GenerationMemory:
    """The generation id one process (or one client) knows, optionally kept in a file too.

    Thread-safe. A worker process shares one per partition between its
    threads, and a forked pool process inherits its parent's
    (:func:`process_memory`); a client keeps its own for its lifetime.
    """

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._generation: str | None = None
        #: Generations this process saw declared lost (the next recovery may be adopted).
        self.saw_loss = False

    @property
    def generation(self) -> str | None:
        """The known generation id (from this process, its parent, or the file)."""
        with self._lock:
            known = self._generation
        return known if known is not None else self._read_file()

    def remember(self, generation: str) -> None:
        """Know ``generation`` from now on (and keep it in the file, when set)."""
        with self._lock:
            self._generation = generation
            self.saw_loss = False
        if self._path is not None and self._read_file() != generation:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self._path.with_name(f".{self._path.name}.{os.getpid()}")
            temporary.write_text(json.dumps({"generation": generation}), encoding="utf-8")
            temporary.replace(self._path)

    def _read_file(self) -> str | None:
        if self._path is None or not self._path.is_file():
            return None
        try:
            value = json.loads(self._path.read_text(encoding="utf-8")).get("generation")
        except (OSError, ValueError, AttributeError):
            return None
        return value if isinstance(value, str) else None


_PROCESS_MEMORY: dict[tuple[str, str], GenerationMemory] = {}
_PROCESS_LOCK = threading.Lock()


def process_memory(redis_url: str, prefix: str, path: Path | None) -> GenerationMemory:
    """This process's memory of one partition (a worker's threads share it; forks inherit it)."""
    with _PROCESS_LOCK:
        memory = _PROCESS_MEMORY.get((redis_url, prefix))
        if memory is None:
            memory = _PROCESS_MEMORY[(redis_url, prefix)] = GenerationMemory(path)
        return memory


@dataclass(frozen=True, slots=True)
class GenerationStatus:
    """One check's verdict.

    Attributes:
        verdict: see the module docstring.
        detail: one line for logs, the CLI and the health check.
        generation: the generation id found (None: none).
        version: the cluster version found.
    """

    verdict: Verdict
    detail: str
    generation: str | None = None
    version: int = 0

    @property
    def ok(self) -> bool:
        """Whether the service may go on deciding."""
        return self.verdict in HEALTHY


class DataLost(RuntimeError):
    """Redis lost the service's data (or a loss was detected and not recovered): nothing is decided.

    The message says what was found and points at the recovery (docs/service.md, *Recovery*).
    """

    def __init__(self, status: GenerationStatus) -> None:
        super().__init__(f"gpusched refuses to decide: {status.detail}; see docs/service.md, Recovery")
        self.status = status


class DataGeneration:
    """What this runtime remembers of its partition's data, and the check against it (one ``MGET``)."""

    def __init__(
        self, partition: Partition, memory: GenerationMemory | None = None,
        replication: Replication | None = None,
    ) -> None:
        self._partition = partition
        self.memory = memory if memory is not None else GenerationMemory()
        #: With replicas required, only acknowledged generations and versions are remembered.
        self._replicated = replication is not None and replication.required > 0
        #: The highest cluster version this runtime read while healthy, under the generation
        #: :attr:`versions_of` (threads share the generation id but not this: a thread that
        #: finds the generation changed, adopted by another, starts counting again).
        self.max_version = 0
        self.versions_of: str | None = None

    @property
    def remembered(self) -> str | None:
        """The generation id known to this runtime's memory."""
        return self.memory.generation

    # ----------------------------------------------------------------- check
    def check(self, *, create: bool = True) -> GenerationStatus:
        """Compare what Redis holds with what this runtime remembers (see the module docstring).

        Writes the generation when there is none and none is remembered (unless
        ``create`` is false: a health probe then reports ``new``), and the loss
        marker and its event on a fresh detection.

        Raises:
            redis.RedisError: Redis failed (reachability is not this check's concern).
        """
        k = self._partition.keys
        raw_generation, raw_marker, raw_version, raw_acked = self._partition.client.mget(
            [k.generation, k.data_lost, k.version, k.acked]
        )
        version = int(raw_version or 0)
        if raw_marker is not None:
            self.memory.saw_loss = True
            found = generation_id(raw_generation)
            return GenerationStatus("halted", _marker_detail(raw_marker), found, version)
        acked = self._acknowledged(generation_id(raw_generation), version, raw_acked)
        status = self._verdict(_parse(raw_generation), version, acked)
        if status.verdict in LOSSES:
            self._mark_lost(status)
        elif status.verdict == "new" and create:
            status = self._create(version)
        if status.ok:
            seen = acked[1] if acked is not None else 0
            if status.generation != self.versions_of:
                self.versions_of, self.max_version = status.generation, seen
            else:
                self.max_version = max(self.max_version, seen)
        return status

    def _acknowledged(self, generation: str | None, version: int, raw: Any) -> tuple[str, int] | None:
        """The generation and cluster version a replica acknowledged (None: none of this generation).

        Without replicas required, everything read is acknowledged (the master's write is all
        there is). With them, a version or generation read but not acknowledged may vanish in a
        failover without anything acknowledged being lost: it is not remembered, so it can never
        cause a false rollback.
        """
        if not self._replicated:
            return generation or "", version
        position = Position.parse(raw)
        if position is None or generation is None or position.generation != generation:
            return None
        return generation, position.version

    def ensure_ok(self, *, create: bool = True) -> GenerationStatus:
        """:meth:`check`, raising when the service must not decide.

        Args:
            create: write the first generation when there is none (workers);
                a client passes False (it may lack the right to write it).

        Raises:
            DataLost: the verdict is ``halted``, ``wiped``, ``replaced`` or ``rolled_back``.
        """
        status = self.check(create=create)
        if not status.ok:
            raise DataLost(status)
        return status

    def _verdict(
        self, found: dict[str, Any] | None, version: int, acked: tuple[str, int] | None
    ) -> GenerationStatus:
        known = self.remembered
        if found is None:
            if known is None:
                return GenerationStatus("new", "no data generation yet", None, version)
            return GenerationStatus(
                "wiped", f"Redis lost its data: generation {known} is gone (cluster version {version})",
                None, version,
            )
        generation = str(found.get("id"))
        if generation != known and found.get("recovery") and (
            known in (found.get("supersedes") or ()) or self.memory.saw_loss
        ):
            return self._adopt(generation, known, version)
        if known is not None and generation != known:
            return GenerationStatus(
                "replaced", f"Redis holds generation {generation}, not {known}: it was wiped and "
                "written again without a recovery", generation, version,
            )
        if generation == self.versions_of and version < self.max_version:
            return GenerationStatus(
                "rolled_back", f"Redis went back in time: cluster version {version} after "
                f"{self.max_version} was read (an older AOF/RDB or a lagging replica)", generation, version,
            )
        if known is None and acked is not None:
            self.memory.remember(generation)
        return GenerationStatus("ok", f"generation {generation}, cluster version {version}",
                                generation, version)

    def _adopt(self, generation: str, known: str | None, version: int) -> GenerationStatus:
        """A recovery superseding what this process knew (or after the loss it saw): adopt it."""
        self.memory.remember(generation)
        self.versions_of, self.max_version = generation, 0  # a recovery rebuilt the state
        log.warning("data_generation_adopted", generation=generation, previous=known)
        return GenerationStatus("recovered", f"generation {generation} recovered from {known or 'a loss'}",
                                generation, version)

    def _create(self, version: int) -> GenerationStatus:
        """Write the first generation (``SET NX``: a concurrent creator's wins) and adopt it."""
        p = self._partition
        record = {"id": uuid.uuid4().hex, "created": utc_now_iso(), "created_by": p.source}
        p.client.set(p.keys.generation, json.dumps(record, sort_keys=True), nx=True)
        found = _parse(p.client.get(p.keys.generation))
        if found is None:  # wiped again between the two commands: the next check says so
            return GenerationStatus("new", "no data generation yet", None, version)
        if not self._replicated:  # else remembered once a replica acknowledged it (next check)
            self.memory.remember(str(found["id"]))
        return GenerationStatus("ok", f"generation {found['id']}, cluster version {version}",
                                str(found["id"]), version)

    def _mark_lost(self, status: GenerationStatus) -> None:
        """Write the loss marker and its event (once for the deployment); log it (every process)."""
        p = self._partition
        marker = {
            "verdict": status.verdict, "detail": status.detail, "detected": utc_now_iso(),
            "detected_by": p.source, "remembered_generation": self.remembered,
            "remembered_version": self.max_version, "found_generation": status.generation,
            "found_version": status.version,
        }
        event = event_fields("sched.data.lost", marker)

        def write_once(pipe: Pipeline) -> bool:
            # the marker and its event in one transaction: never one without the other
            if pipe.exists(p.keys.data_lost):
                return False
            pipe.multi()
            pipe.set(p.keys.data_lost, json.dumps(marker, sort_keys=True))
            pipe.xadd(p.keys.events, event)  # type: ignore[arg-type]
            return True

        # redis-py's stubs type the callable as returning None; value_from_callable returns it
        first = p.client.transaction(
            write_once,  # type: ignore[arg-type]
            p.keys.data_lost,
            value_from_callable=True,
        )
        log.critical("data_lost", verdict=status.verdict, detail=status.detail, first=bool(first),
                     action="not deciding until recovered: see docs/service.md, Recovery")


def _parse(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return {"id": str(raw)}
    return value if isinstance(value, dict) and value.get("id") else {"id": str(raw)}


def generation_id(raw: Any) -> str | None:
    """The id of a stored generation record, as the check reads it (a bare value is its own id;
    None when there is none)."""
    found = _parse(raw)
    return None if found is None else str(found["id"])


def _marker_detail(raw: Any) -> str:
    try:
        marker = json.loads(raw)
        return f"data loss detected at {marker['detected']}: {marker['detail']}; not recovered yet"
    except (ValueError, KeyError, TypeError):
        return "data loss detected; not recovered yet"
