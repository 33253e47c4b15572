"""Replay: rebuild every recorded decision's inputs from the event log and re-run the core.

Inputs of a decision (``sched.decision.made``):

* the request — from the request's ``sched.request.received`` event logged
  last before the decision (an id may be reused once its record expired);
* the cluster at ``cluster_version`` — the fold of every cluster change event
  (``sched.cluster.applied`` references a content-addressed snapshot stored
  once under ``gpusched:snapshot:<sha256>``; the other changes carry their
  rows) up to that version;
* the chain — the spec recorded in the decision event.

The replayed result's digest must equal the recorded ``result_digest``
(the core is deterministic byte for byte). A decision that differs is shown
as a unified diff of the recorded and replayed outcome summaries.

Where the log starts: once the retention trimmed it
(:mod:`tasks.audit.retention`), replay starts from the checkpoint it was
trimmed behind (:mod:`tasks.audit.checkpoints`: the cluster at its version
and the requests pending then) and folds the log after its position. With
archive files (:mod:`tasks.audit.archive`), it reads them first and replays
the whole history from version 0.

How: the log is read once; a long one is then split into runs of consecutive
cluster versions, each replayed by a forked process with its own memo
(:func:`_replay_in_processes`), since re-deciding is nearly all of a replay's
time (the warm core) and the runs are independent given the fold at their start.
"""

from __future__ import annotations

import difflib
import gc
import json
import os
import selectors
import signal
import time
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from itertools import takewhile
from pathlib import Path
from typing import Any

import redis

from scheduler_core import ScheduleResult, SnapshotMemo, canonical_json
from tasks.audit.archive import Entry, read_archive, read_archived_snapshots
from tasks.audit.checkpoints import Checkpoint, load_checkpoint
from tasks.audit.decision_event import outcome_summary
from tasks.base.digests import result_digest
from tasks.base.events import Event
from tasks.decision.core_call import run_core
from tasks.intake.chain_config import ChainConfigError, LoadedChain, parse_chain
from tasks.intake.snapshots import SnapshotRows, parse_snapshot
from tasks.state.cluster_store import ClusterStore
from tasks.state.fold import CHANGE_TYPES, ClusterFold
from tasks.state.streams import iter_stream, stream_id_key

DECISION = "sched.decision.made"
RECEIVED = "sched.request.received"

#: Progress is reported at least every this many events read or decisions replayed ...
PROGRESS_EVERY = 10_000
#: ... and every this many seconds.
PROGRESS_SECONDS = 2.0

#: Entries read from the live log per ``XRANGE`` (fewer round trips than the stream
#: module's default page of 1,000; each page is parsed whole before the next is asked for).
PAGE = 10_000

#: Logs of fewer decisions replay in this process alone: each further replay process
#: starts with an empty memo, and its first decision is a cold one (~0.15 s at 2,000 × 8).
PARALLEL_FROM = 1_000

#: Replay processes at most when the caller leaves it to replay (one per core, up to this).
MAX_PROCESSES = 4

#: ``progress(phase, done)``: ``phase`` is ``read`` (events) or ``replayed`` (decisions).
Progress = Callable[[str, int], None]


class ReplayError(Exception):
    """The log cannot be replayed at all (e.g. its checkpoint is gone)."""


@dataclass(frozen=True, slots=True)
class Difference:
    """One decision whose replay differs from the record."""

    request_id: str
    event_id: str
    cluster_version: int
    recorded_digest: str
    replayed_digest: str
    diff: list[str]


@dataclass(slots=True)
class ReplayReport:
    """Counts, the differences, and decisions that could not be rebuilt (with why)."""

    replayed: int = 0
    identical: int = 0
    differences: list[Difference] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    #: The checkpoint version replay started from (None: from version 0).
    start_version: int | None = None

    @property
    def differ(self) -> int:
        """Number of decisions whose replay differs."""
        return len(self.differences)

    def summary(self) -> str:
        """``N replayed, N identical, N differ``."""
        return f"{self.replayed} replayed, {self.identical} identical, {self.differ} differ"


@dataclass(slots=True)
class _Log:
    requests: dict[str, str] = field(default_factory=dict)
    changes: list[Event] = field(default_factory=list)
    decisions: list[Event] = field(default_factory=list)
    #: decision stream id → the request as received last before it
    decided_requests: dict[str, str] = field(default_factory=dict)


def _read_log(
    entries: Iterable[Entry], request_id: str | None, since: str | None, meter: _Meter,
    requests: dict[str, str] | None = None,
) -> _Log:
    log = _Log(requests=dict(requests or {}))
    for entry_id, fields in entries:
        meter.tick("read")
        event_type = fields.get("type", "")
        if event_type == RECEIVED:
            event = Event.from_entry(entry_id, fields)
            if event.request_id:
                log.requests[event.request_id] = canonical_json(event.data["request"])
        elif event_type in CHANGE_TYPES:
            log.changes.append(Event.from_entry(entry_id, fields))
        elif event_type == DECISION and _selected(entry_id, fields, request_id, since):
            log.decisions.append(Event.from_entry(entry_id, fields))
            received = log.requests.get(fields.get("request_id", ""))
            if received is not None:
                log.decided_requests[entry_id] = received
    return log


class _Meter:
    """Calls ``progress`` every :data:`PROGRESS_EVERY` ticks or :data:`PROGRESS_SECONDS`."""

    def __init__(self, progress: Progress | None) -> None:
        self._progress = progress
        self._counts: dict[str, int] = defaultdict(int)
        self._last = time.monotonic()

    def tick(self, phase: str) -> None:
        self.advance(phase, 1)

    def advance(self, phase: str, done: int) -> None:
        """``done`` more in ``phase``: reported when a multiple of :data:`PROGRESS_EVERY` is
        reached or passed, or :data:`PROGRESS_SECONDS` after the last report."""
        before = self._counts[phase]
        count = self._counts[phase] = before + done
        if self._progress is None or done <= 0:
            return
        now = time.monotonic()
        if count // PROGRESS_EVERY > before // PROGRESS_EVERY or now - self._last >= PROGRESS_SECONDS:
            self._last = now
            self._progress(phase, count)


def _selected(entry_id: str, fields: dict[str, str], request_id: str | None, since: str | None) -> bool:
    if request_id is not None and fields.get("request_id") != request_id:
        return False
    return since is None or _stream_id_key(entry_id) >= _stream_id_key(since)


_stream_id_key = stream_id_key


def _decisions_by_version(decisions: list[Event]) -> dict[int, list[Event]]:
    by_version: dict[int, list[Event]] = defaultdict(list)
    for decision in decisions:
        by_version[int(decision.data["cluster_version"])].append(decision)
    return by_version


def replay(
    client: redis.Redis,
    cluster: ClusterStore,
    *,
    request_id: str | None = None,
    since: str | None = None,
    archive: Sequence[Path] = (),
    progress: Progress | None = None,
    until: str | None = None,
    processes: int | None = None,
) -> ReplayReport:
    """Re-run recorded decisions (all, one request's, or those logged at/after ``since``).

    Args:
        archive: archive files to read before the live log (then from version 0).
        progress: called now and then while reading and replaying (see :data:`Progress`).
        until: read the live log only up to this id (the acknowledged position, when the
            deployment waits for replicas: what a failover could take back is not audited).
        processes: how many processes re-run the decisions (None: one per core, up to
            :data:`MAX_PROCESSES`, for a log of :data:`PARALLEL_FROM` decisions or more).
            Each takes a run of consecutive cluster versions, with its own memo; the report
            is the same whatever the number (every decision is re-decided and its digest
            checked either way).

    Raises:
        ReplayError: the log was trimmed behind a checkpoint that is no longer stored,
            an archive file is not readable, or a replay process failed.
    """
    meter = _Meter(progress)
    start = None if archive else _start(client, cluster)
    try:
        entries = _entries(client, cluster.keys.events, start, archive)
        if until is not None:
            entries = takewhile(lambda entry: _stream_id_key(entry[0]) <= _stream_id_key(until), entries)
        log = _read_log(entries, request_id, since, meter, dict(start.requests) if start else None)
        archived = read_archived_snapshots(archive)
    except (OSError, ValueError) as error:
        raise ReplayError(str(error)) from None

    def snapshot_rows(digest: str) -> SnapshotRows:
        text = archived.get(digest)
        return cluster.snapshot_rows(digest) if text is None else parse_snapshot(json.loads(text))

    pending = _decisions_by_version(log.decisions)
    report = ReplayReport(start_version=start.version if start else None)
    fold = start.fold() if start else ClusterFold()
    walk = _Walk(fold, _fold_versions(fold, log.changes, snapshot_rows, report, pending), pending)
    count = _process_count(processes, len(log.decisions))
    with _frozen_heap():  # the log just read stays: the collector need not walk it again
        if count > 1:
            _replay_in_processes(walk, log.decided_requests, report, meter, count, len(log.decisions))
        else:
            _replay_segment(walk, log.decided_requests, report, meter.tick)
    for decisions in pending.values():
        for decision in decisions:
            report.skipped.append((decision.stream_id, "its cluster version is not in the log"))
    return report


def _process_count(processes: int | None, decisions: int) -> int:
    """The replay processes to use (1 where ``os.fork`` is missing)."""
    if not hasattr(os, "fork"):
        return 1
    if processes is not None:
        return max(1, processes)
    if decisions < PARALLEL_FROM:
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, MAX_PROCESSES))


@contextmanager
def _frozen_heap() -> Iterator[None]:
    """Everything alive now out of the collector's reach while replaying (``gc.freeze``):
    a full collection no longer walks the log's hundreds of thousands of objects, and a
    forked replay process does not copy their pages by touching them."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class _Walk:
    """The fold walked version by version (:func:`_fold_versions`): iterating yields each
    version's decisions with the fold at that version, and counts the decisions handed out
    before the current version (:attr:`handed`). A forked process goes on with its copy."""

    def __init__(
        self, fold: ClusterFold, versions: Iterator[tuple[int, list[Event]]], pending: dict[int, list[Event]]
    ) -> None:
        self.fold = fold
        self.handed = 0
        self._versions = versions
        self._pending = pending

    def __iter__(self) -> Iterator[list[Event]]:
        return self

    def __next__(self) -> list[Event]:
        version, decisions = next(self._versions)
        self._pending.pop(version, None)
        return decisions

    def advance(self, decisions: list[Event]) -> list[Event] | None:
        """Count ``decisions`` as handed out; the next version's (None: the log ends)."""
        self.handed += len(decisions)
        return next(self, None)


def _replay_segment(
    walk: _Walk,
    requests: dict[str, str],
    report: ReplayReport,
    tick: Callable[[str], None],
    decisions: list[Event] | None = None,
    stop: int | None = None,
) -> None:
    """Replay version after version, from ``decisions`` (None: the walk's next version's) up
    to the first version with decisions where ``stop`` decisions were handed out before it
    (None: to the end), with one memo: the segment one process replays."""
    memo, chains = SnapshotMemo(), _Chains()
    current = next(walk, None) if decisions is None else decisions
    while current is not None:
        for decision in current:
            _replay_one(walk.fold, decision, requests, report, memo, chains)
            tick("replayed")
        current = walk.advance(current)
        if current and stop is not None and walk.handed >= stop:
            return


def _replay_in_processes(
    walk: _Walk, requests: dict[str, str], report: ReplayReport, meter: _Meter, count: int, total: int
) -> None:
    """Split the walk into ``count`` segments of about as many decisions, each replayed by a
    forked process that goes on from the fold where its segment starts, while this one folds
    on to the next segment's start; the segments' reports are joined in order.

    Segment ``k`` starts at the first version with decisions, after segment ``k - 1``'s
    start, before which ``total * k // count`` decisions were handed out; each process ends
    its segment by the same rule, so every version is replayed by exactly one of them.

    Raises:
        ReplayError: a replay process failed (its error is in the message).
    """
    starts = [total * k // count for k in range(count)]
    children: list[_Child] = []
    try:
        current = next(walk, None)
        while current is not None:
            k = len(children)
            if k < count and current and walk.handed >= starts[k]:
                stop = starts[k + 1] if k + 1 < count else None
                children.append(_fork_segment(walk, requests, current, stop))
            current = walk.advance(current)
        segments = _collect(children, meter)
    finally:
        for child in children:
            child.end()
    fold_skipped, report.skipped = report.skipped, []
    for segment in segments:
        report.replayed += segment.replayed
        report.identical += segment.identical
        report.differences.extend(segment.differences)
        report.skipped.extend(segment.skipped)
    report.skipped.extend(fold_skipped)


#: A replay process reports progress every this many decisions.
CHILD_PROGRESS_EVERY = 100


@dataclass(slots=True)
class _Child:
    """A forked replay process and the read end of its pipe (lines: ``P <n>``, then
    ``R <report JSON>`` or ``E <error JSON>``)."""

    pid: int
    fd: int
    buffer: bytes = b""
    report: ReplayReport | None = None
    error: str | None = None
    done: bool = False

    def end(self) -> None:
        """Stop the process if it still runs, and reap it (idempotent)."""
        if self.pid:
            if not self.done:
                try:
                    os.kill(self.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            os.waitpid(self.pid, 0)
            self.pid = 0
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _fork_segment(walk: _Walk, requests: dict[str, str], decisions: list[Event], stop: int | None) -> _Child:
    """Fork a process replaying the segment starting at ``decisions``; it never returns here."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write_fd)
        return _Child(pid, read_fd)
    code = 1
    try:
        os.close(read_fd)
        with os.fdopen(write_fd, "w", encoding="utf-8") as out:
            try:
                segment = ReplayReport()
                ticks = _ChildTicks(out)
                _replay_segment(walk, requests, segment, ticks, decisions, stop)
                ticks.flush()
                out.write("R " + json.dumps(_report_json(segment)) + "\n")
                code = 0
            except BaseException:
                out.write("E " + json.dumps(traceback.format_exc()) + "\n")
    finally:
        os._exit(code)


class _ChildTicks:
    """A replay process's ``tick``: writes ``P <n>`` every :data:`CHILD_PROGRESS_EVERY`."""

    def __init__(self, out: Any) -> None:
        self._out = out
        self._count = 0

    def __call__(self, phase: str) -> None:
        self._count += 1
        if self._count >= CHILD_PROGRESS_EVERY:
            self.flush()

    def flush(self) -> None:
        if self._count:
            self._out.write(f"P {self._count}\n")
            self._out.flush()
            self._count = 0


def _report_json(report: ReplayReport) -> dict[str, Any]:
    return {"replayed": report.replayed, "identical": report.identical,
            "differences": [asdict(d) for d in report.differences], "skipped": report.skipped}


def _report_from(value: dict[str, Any]) -> ReplayReport:
    return ReplayReport(
        replayed=value["replayed"], identical=value["identical"],
        differences=[Difference(**d) for d in value["differences"]],
        skipped=[(event_id, reason) for event_id, reason in value["skipped"]],
    )


def _collect(children: list[_Child], meter: _Meter) -> list[ReplayReport]:
    """Read every process's pipe to its end (progress into ``meter``); their reports in order.

    Raises:
        ReplayError: a process ended without a report.
    """
    with selectors.DefaultSelector() as selector:
        for child in children:
            selector.register(child.fd, selectors.EVENT_READ, child)
        while selector.get_map():
            for key, _ in selector.select():
                child = key.data
                chunk = os.read(child.fd, 1 << 16)
                if not chunk:
                    selector.unregister(child.fd)
                    child.done = True
                    continue
                _take_lines(child, chunk, meter)
    for child in children:
        if child.report is None:
            raise ReplayError(f"a replay process failed: {child.error or 'it ended without a report'}")
    return [child.report for child in children if child.report is not None]


def _take_lines(child: _Child, chunk: bytes, meter: _Meter) -> None:
    *lines, child.buffer = (child.buffer + chunk).split(b"\n")
    for line in lines:
        kind, _, text = line.decode("utf-8").partition(" ")
        if kind == "P":
            meter.advance("replayed", int(text))
        elif kind == "R":
            child.report = _report_from(json.loads(text))
        elif kind == "E":
            child.error = json.loads(text)


def _start(client: redis.Redis, cluster: ClusterStore) -> Checkpoint | None:
    """The checkpoint the log was trimmed behind (None: the log is whole)."""
    version = client.hget(cluster.keys.audit_state, "trimmed_version")
    if version is None:
        return None
    try:
        return load_checkpoint(client, cluster.keys, int(version))
    except LookupError:
        raise ReplayError(
            f"the audit log was trimmed behind checkpoint {int(version)}, which is no longer stored; "
            "replay the archive (--archive) instead"
        ) from None


def _entries(
    client: redis.Redis, stream: str, start: Checkpoint | None, archive: Sequence[Path]
) -> Iterator[Entry]:
    """The archive files' entries, then the live log's after them (or after the checkpoint)."""
    last = start.position if start else ""
    for entry_id, fields in read_archive(archive):
        last = entry_id
        yield entry_id, fields
    yield from iter_stream(client, stream, f"({last}" if last else "-", page=PAGE)


def _fold_versions(
    fold: ClusterFold,
    changes: list[Event],
    snapshot_rows: Callable[[str], SnapshotRows],
    report: ReplayReport,
    pending: dict[int, list[Event]],
) -> Iterator[tuple[int, list[Event]]]:
    """Yield (version, decisions at it) while folding the changes in version order."""
    ordered = [e for e in sorted(changes, key=lambda event: event.cluster_version or 0)
               if (e.cluster_version or 0) > fold.version]
    yield fold.version, pending.get(fold.version, [])
    for change in ordered:
        version = change.cluster_version or 0
        try:
            fold.apply_change(change.type, version, change.data, snapshot_rows)
        except (LookupError, ValueError) as error:
            report.skipped.extend(
                (d.stream_id, f"cannot rebuild the cluster: {error}")
                for ds in pending.values() for d in ds
            )
            pending.clear()
            return
        yield version, pending.get(version, [])


class _Chains:
    """Each recorded chain parsed once (by its spec's text): a log holds a handful."""

    def __init__(self) -> None:
        self._parsed: dict[str, LoadedChain] = {}

    def __call__(self, recorded: dict[str, Any]) -> LoadedChain:
        """The chain of a decision event's ``chain`` spec.

        Raises:
            ChainConfigError: the spec names no chain this version knows.
        """
        spec = {k: v for k, v in recorded.items() if k != "digest"}
        key = canonical_json(spec)
        if key not in self._parsed:
            self._parsed[key] = parse_chain(spec)
        return self._parsed[key]


def _replay_one(
    fold: ClusterFold, decision: Event, requests: dict[str, str], report: ReplayReport,
    memo: SnapshotMemo, chains: _Chains,
) -> None:
    request_id = decision.request_id or ""
    request_json = requests.get(decision.stream_id)
    if request_json is None:
        report.skipped.append((decision.stream_id, "its sched.request.received event is missing"))
        return
    try:
        chain = chains(decision.data["chain"])
    except ChainConfigError as error:
        report.skipped.append((decision.stream_id, f"unknown chain: {error}"))
        return
    roots = decision.data.get("model_roots")  # the deciding worker's, when a local folder was named
    _, result, _ = run_core(chain, request_json, request_id, fold, memo,
                         model_roots=tuple(roots) if isinstance(roots, list) else None)
    _, digest = result_digest(result)
    report.replayed += 1
    recorded = decision.data["result_digest"]
    if digest == recorded or recorded_before_failures(decision.data, result):
        report.identical += 1
        return
    report.differences.append(
        Difference(request_id, decision.stream_id, fold.version, recorded, digest,
                   _diff(decision.data.get("outcome") or {}, outcome_summary(result)))
    )


def recorded_before_failures(data: dict[str, Any], result: ScheduleResult) -> bool:
    """Whether ``data`` is a decision recorded before results carried ``failures`` (its event's
    outcome has no ``failures`` key) whose digest is the replayed result's without that
    additive field: the same decision, recorded by an older gpusched."""
    if result.failures is None or "failures" in (data.get("outcome") or {}):
        return False
    _, digest = result_digest(result.model_copy(update={"failures": None}))
    return bool(digest == data["result_digest"])


def _diff(recorded: dict[str, Any], replayed: dict[str, Any]) -> list[str]:
    before = json.dumps(recorded, indent=1, sort_keys=True).splitlines()
    after = json.dumps(replayed, indent=1, sort_keys=True).splitlines()
    lines = list(difflib.unified_diff(before, after, "recorded", "replayed", lineterm=""))
    return lines or ["(outcome summaries agree; the results differ in the full candidate list)"]


def format_report(report: ReplayReport) -> str:
    """The report as printed by ``gpusched replay``."""
    lines = [report.summary()]
    if report.start_version is not None:
        lines.append(
            f"(from the checkpoint at cluster version {report.start_version}: the log before it was trimmed)"
        )
    for difference in report.differences:
        lines.append(
            f"--- {difference.request_id} (event {difference.event_id}, cluster version "
            f"{difference.cluster_version}): recorded {difference.recorded_digest[:12]}, "
            f"replayed {difference.replayed_digest[:12]}"
        )
        lines.extend(difference.diff)
    if report.skipped:
        lines.append(f"{len(report.skipped)} skipped:")
        lines.extend(f"  {event_id}: {reason}" for event_id, reason in report.skipped)
    return "\n".join(lines)
