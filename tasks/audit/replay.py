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
"""

from __future__ import annotations

import difflib
import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

from scheduler_core import canonical_json
from tasks.audit.decision_event import outcome_summary
from tasks.audit.digests import result_digest
from tasks.audit.events import Event
from tasks.audit.fold import CHANGE_TYPES, ClusterFold
from tasks.audit.streams import iter_stream
from tasks.decision.chain_config import ChainConfigError, parse_chain
from tasks.decision.core_call import run_core
from tasks.state.cluster_store import ClusterStore

DECISION = "sched.decision.made"
RECEIVED = "sched.request.received"


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


def _read_log(client: redis.Redis, stream: str, request_id: str | None, since: str | None) -> _Log:
    log = _Log()
    for entry_id, fields in iter_stream(client, stream):
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


def _selected(entry_id: str, fields: dict[str, str], request_id: str | None, since: str | None) -> bool:
    if request_id is not None and fields.get("request_id") != request_id:
        return False
    return since is None or _stream_id_key(entry_id) >= _stream_id_key(since)


def _stream_id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


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
) -> ReplayReport:
    """Re-run recorded decisions (all, one request's, or those logged at/after ``since``)."""
    log = _read_log(client, cluster.keys.events, request_id, since)
    pending = _decisions_by_version(log.decisions)
    report = ReplayReport()
    fold = ClusterFold()
    for version, decisions in _fold_versions(fold, log.changes, cluster, report, pending):
        for decision in decisions:
            _replay_one(fold, decision, log.decided_requests, report)
        pending.pop(version, None)
    for decisions in pending.values():
        for decision in decisions:
            report.skipped.append((decision.stream_id, "its cluster version is not in the log"))
    return report


def _fold_versions(
    fold: ClusterFold,
    changes: list[Event],
    cluster: ClusterStore,
    report: ReplayReport,
    pending: dict[int, list[Event]],
) -> Iterator[tuple[int, list[Event]]]:
    """Yield (version, decisions at it) while folding the changes in version order."""
    ordered = sorted(changes, key=lambda event: event.cluster_version or 0)
    yield 0, pending.get(0, [])
    for change in ordered:
        version = change.cluster_version or 0
        try:
            fold.apply_change(change.type, version, change.data, cluster.snapshot_rows)
        except (LookupError, ValueError) as error:
            report.skipped.extend(
                (d.stream_id, f"cannot rebuild the cluster: {error}")
                for v, ds in pending.items() if v >= version for d in ds
            )
            pending.clear()
            return
        yield version, pending.get(version, [])


def _replay_one(
    fold: ClusterFold, decision: Event, requests: dict[str, str], report: ReplayReport
) -> None:
    request_id = decision.request_id or ""
    request_json = requests.get(decision.stream_id)
    if request_json is None:
        report.skipped.append((decision.stream_id, "its sched.request.received event is missing"))
        return
    try:
        chain = parse_chain({k: v for k, v in decision.data["chain"].items() if k != "digest"})
    except ChainConfigError as error:
        report.skipped.append((decision.stream_id, f"unknown chain: {error}"))
        return
    _, result = run_core(chain, request_json, request_id, fold)
    _, digest = result_digest(result)
    report.replayed += 1
    recorded = decision.data["result_digest"]
    if digest == recorded:
        report.identical += 1
        return
    report.differences.append(
        Difference(request_id, decision.stream_id, fold.version, recorded, digest,
                   _diff(decision.data.get("outcome") or {}, outcome_summary(result)))
    )


def _diff(recorded: dict[str, Any], replayed: dict[str, Any]) -> list[str]:
    before = json.dumps(recorded, indent=1, sort_keys=True).splitlines()
    after = json.dumps(replayed, indent=1, sort_keys=True).splitlines()
    lines = list(difflib.unified_diff(before, after, "recorded", "replayed", lineterm=""))
    return lines or ["(outcome summaries agree; the results differ in the full candidate list)"]


def format_report(report: ReplayReport) -> str:
    """The report as printed by ``gpusched replay``."""
    lines = [report.summary()]
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
