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
"""

from __future__ import annotations

import difflib
import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
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
        count = self._counts[phase] = self._counts[phase] + 1
        if self._progress is None:
            return
        now = time.monotonic()
        if count % PROGRESS_EVERY == 0 or now - self._last >= PROGRESS_SECONDS:
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
) -> ReplayReport:
    """Re-run recorded decisions (all, one request's, or those logged at/after ``since``).

    Args:
        archive: archive files to read before the live log (then from version 0).
        progress: called now and then while reading and replaying (see :data:`Progress`).
        until: read the live log only up to this id (the acknowledged position, when the
            deployment waits for replicas: what a failover could take back is not audited).

    Raises:
        ReplayError: the log was trimmed behind a checkpoint that is no longer stored,
            or an archive file is not readable.
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
    # One memo across the whole replay, as a decider keeps one across its decisions: it reuses
    # what an unchanged worker's rules computed (never a result: property-tested), so a replay
    # of a 2,000-worker log costs what the decisions' rules cost, not a cold decision each.
    memo, chains = SnapshotMemo(), _Chains()
    for version, decisions in _fold_versions(fold, log.changes, snapshot_rows, report, pending):
        for decision in decisions:
            _replay_one(fold, decision, log.decided_requests, report, memo, chains)
            meter.tick("replayed")
        pending.pop(version, None)
    for decisions in pending.values():
        for decision in decisions:
            report.skipped.append((decision.stream_id, "its cluster version is not in the log"))
    return report


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
    yield from iter_stream(client, stream, f"({last}" if last else "-")


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
