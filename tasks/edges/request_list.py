"""``gpusched list`` and the console's requests page: every request by state, with age, searchable.

No index of requests is kept: every request the service knows is in one of
three places, which are read here, bounded:

* in flight (queued, deciding, retrying, woken): the outbox watchdog
  (``gpusched:outbox``, one member per unfinished decision; at most
  :data:`MAX_IN_FLIGHT` read);
* parked: ``gpusched:parked`` (all of it: its reasons are the summary);
* finished (placed, released, moved, rejected, cancelled, expired): the
  results stream, read newest first back to ``since`` and at most
  :data:`MAX_RESULTS_SCANNED` entries (the answer says how far back it read).

Each candidate's record is then read with ``HMGET`` (small fields only), so
the state shown is the record's own — a placement published an hour ago and
released since shows ``released``. The rows shown (at most ``limit``) are
enriched with the model's name, where it is placed and why it was refused.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from tasks.base.lifecycle import RecordState
from tasks.base.rows import booked_instance_key
from tasks.state.context import Runtime
from tasks.state.ledger import decode_amounts

#: The states a request is listed under, in the summary's order.
STATES = ("queued", "deciding", "parked", "placed", "released", "moved", "rejected", "cancelled", "expired")
#: Record states (:class:`~tasks.base.lifecycle.RecordState`) of a request waiting for or in a decision.
_QUEUED = frozenset({RecordState.QUEUED, RecordState.WOKEN})
_DECIDING = frozenset({RecordState.DECIDING, RecordState.DECIDED, RecordState.BOOKED, RecordState.RETRYING})
#: Most outbox members read (each is an unfinished decision; a burst can queue tens of thousands).
MAX_IN_FLIGHT = 10_000
#: Most results-stream entries read per listing (each holds a whole result: ~1.5 KB and up).
MAX_RESULTS_SCANNED = 20_000
#: Results-stream entries read per round trip.
PAGE = 500
#: Record fields read for every candidate (never the request or the result: they can be large).
_FIELDS = ("state", "status", "seq", "created_ms", "updated_ms", "moved_to", "replaces", "released")


@dataclass(frozen=True, slots=True)
class ListQuery:
    """Which requests to list.

    Attributes:
        state: one of :data:`STATES` (None: all).
        reason: only parked requests waiting for this reason code.
        search: only request ids containing this (case-insensitive).
        since_ms: only requests updated at or after this time (ms since the epoch).
        limit: most rows returned (newest first).
    """

    state: str | None = None
    reason: str | None = None
    search: str | None = None
    since_ms: int | None = None
    limit: int = 200

    def wants_finished(self) -> bool:
        """Whether the results stream must be read (a finished state, or all)."""
        return self.state not in ("queued", "deciding", "parked") and self.reason is None


def category(record: Mapping[str, str]) -> str:
    """The state a request is listed under, from its record."""
    state = record.get("state") or ""
    if state in _QUEUED:
        return "queued"
    if state in _DECIDING:
        return "deciding"
    if state != RecordState.DONE:
        return state or "unknown"
    status = record.get("status") or ""
    if status == "scheduled":
        if record.get("moved_to"):
            return "moved"
        return "released" if record.get("released") else "placed"
    return "expired" if status == "unschedulable" else status


def list_requests(rt: Runtime, query: ListQuery = ListQuery()) -> dict[str, Any]:
    """The requests matching ``query`` (JSON-ready): ``summary`` (counts per state and per parked
    reason over everything read), ``requests`` (newest first, at most ``query.limit``),
    ``scanned`` (how much of the results stream was read) and ``now``."""
    now = rt.partition.now_ms()
    parked = {rid: json.loads(raw) for rid, raw in rt.parked.entries().items()}
    in_flight = _in_flight(rt)
    finished, scanned = _finished(rt, query.since_ms) if query.wants_finished() else ({}, _scan_info(0, None))
    ids = sorted({*in_flight, *parked, *finished})
    records = dict(zip(ids, _records(rt, ids), strict=True))
    rows = [_row(rid, record, parked.get(rid), finished.get(rid), now)
            for rid, record in records.items() if record.get("state")]
    summary = _summary(rows)
    chosen = sorted((row for row in rows if _matches(row, query)), key=_newest_first)[: max(query.limit, 0)]
    _enrich(rt, chosen, parked)
    return {"now": _iso(now), "summary": summary, "scanned": scanned, "requests": chosen}


def _in_flight(rt: Runtime) -> set[str]:
    members = rt.client.zrange(rt.keys.outbox, 0, MAX_IN_FLIGHT - 1)
    return {str(member).split("|", 1)[0] for member in members}


def _finished(rt: Runtime, since_ms: int | None) -> tuple[dict[str, int], dict[str, Any]]:
    """Request id → ms of its newest results entry, reading back to ``since_ms``, bounded."""
    seen: dict[str, int] = {}
    read, oldest, end = 0, None, "+"
    stop = f"{since_ms}-0" if since_ms else "-"
    while read < MAX_RESULTS_SCANNED:
        page = cast(list[tuple[str, dict[str, str]]],
                    rt.client.xrevrange(rt.keys.results, max=end, min=stop, count=PAGE))
        for entry_id, fields in page:
            ms = int(entry_id.split("-", 1)[0])
            rid = fields.get("request_id") or ""
            if rid:
                seen.setdefault(rid, ms)
            oldest = ms
        read += len(page)
        if len(page) < PAGE:
            return seen, _scan_info(read, oldest, complete=True)
        end = f"({page[-1][0]}"
    return seen, _scan_info(read, oldest, complete=False)


def _scan_info(read: int, oldest_ms: int | None, complete: bool = True) -> dict[str, Any]:
    return {"results_read": read, "oldest": _iso(oldest_ms), "complete": complete}


def _records(rt: Runtime, ids: Sequence[str]) -> Iterator[dict[str, str]]:
    for start in range(0, len(ids), 1000):
        pipe = rt.client.pipeline(transaction=False)
        for rid in ids[start : start + 1000]:
            pipe.hmget(rt.keys.request(rid), _FIELDS)
        for values in pipe.execute():
            yield {field: value for field, value in zip(_FIELDS, values, strict=True) if value is not None}


def _row(rid: str, record: Mapping[str, str], parked: Mapping[str, Any] | None, finished_ms: int | None,
         now: int) -> dict[str, Any]:
    created = int(record.get("created_ms") or 0)
    updated = int(record.get("updated_ms") or 0) or finished_ms or created
    state = category(record)
    return {
        "request_id": rid, "state": state, "record_state": record.get("state"),
        "seq": int(record.get("seq") or 0),
        "reasons": list((parked or {}).get("reasons") or []) if state == "parked" else [],
        "created": _iso(created), "updated": _iso(updated),
        "age_s": round((now - created) / 1000) if created else None,
        "since_s": round((now - updated) / 1000) if updated else None,
        "updated_ms": updated,
        "moved_to": record.get("moved_to") or None, "reschedule_of": record.get("replaces") or None,
        "model": None, "placement": [], "error": None,
    }


def _matches(row: Mapping[str, Any], query: ListQuery) -> bool:
    if query.state and row["state"] != query.state:
        return False
    if query.reason and query.reason not in row["reasons"]:
        return False
    if query.since_ms and row["updated_ms"] < query.since_ms:
        return False
    return not query.search or query.search.lower() in row["request_id"].lower()


def _newest_first(row: Mapping[str, Any]) -> tuple[int, str]:
    return -int(row["updated_ms"] or 0), str(row["request_id"])


def _summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    states = Counter(row["state"] for row in rows)
    reasons = Counter(reason for row in rows if row["state"] == "parked"
                      for reason in row["reasons"] or ["?"])
    return {
        "states": {**{state: states.get(state, 0) for state in STATES}, **dict(sorted(states.items()))},
        "parked_reasons": dict(sorted(reasons.items(), key=lambda item: (-item[1], item[0]))),
    }


# ------------------------------------------------------------------ enriching
def _enrich(rt: Runtime, rows: list[dict[str, Any]], parked: Mapping[str, Any]) -> None:
    """Model name, placement (worker name and GPUs) and refusal of the rows shown."""
    if not rows:
        return
    pipe = rt.client.pipeline(transaction=False)
    for row in rows:
        pipe.hmget(rt.keys.request(row["request_id"]), ["request", "result"])
        pipe.hget(rt.keys.claims, booked_instance_key(row["request_id"]))
    replies = pipe.execute()
    claims = {}
    for row, (stored, claim) in zip(rows, zip(replies[::2], replies[1::2], strict=True), strict=True):
        request_json, result_json = stored
        row["model"] = _model_name(request_json)
        if row["state"] == "rejected":
            row["error"] = _error(result_json)
        claims[row["request_id"]] = decode_amounts(claim) if claim else {}
    names = worker_names(rt, {int(key.split(":", 1)[0]) for held in claims.values() for key in held})
    for row in rows:
        row["placement"] = placement_summary(claims[row["request_id"]], names)


def _model_name(request_json: str | None) -> str | None:
    try:
        model = json.loads(request_json or "{}").get("model")
    except (ValueError, AttributeError):
        return None
    return str(model.get("name")) if isinstance(model, dict) and model.get("name") is not None else None


def _error(result_json: str | None) -> dict[str, Any] | None:
    try:
        error = json.loads(result_json or "{}").get("error")
    except (ValueError, AttributeError):
        return None
    return error if isinstance(error, dict) else None


def worker_names(rt: Runtime, worker_ids: Iterable[int]) -> dict[int, str]:
    """Worker id → name, for the given ids (their rows are read and parsed)."""
    wanted = sorted(set(worker_ids))
    if not wanted:
        return {}
    rows = rt.client.hmget(rt.keys.workers, [str(wid) for wid in wanted])
    return {wid: str(json.loads(row).get("name")) for wid, row in zip(wanted, rows, strict=True) if row}


def placement_summary(claims: Mapping[str, int], names: Mapping[int, str]) -> list[dict[str, Any]]:
    """A booking's GPUs grouped by worker: ``[{worker_id, worker, gpus: ["cuda:0", ...]}]``."""
    by_worker: dict[int, list[str]] = {}
    for key in sorted(claims):
        worker, _, rest = key.partition(":")
        gpu_type, _, index = rest.rpartition(":")
        by_worker.setdefault(int(worker), []).append(f"{gpu_type}:{index}")
    return [{"worker_id": wid, "worker": names.get(wid, f"#{wid}"), "gpus": gpus}
            for wid, gpus in sorted(by_worker.items())]


def _iso(ms: int | None) -> str | None:
    if not ms:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
