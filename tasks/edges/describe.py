"""``gpusched describe REQUEST_ID``: one request as an operator needs it (like ``kubectl describe``).

:func:`describe_request` gathers, from the request's record, its stored
result, its parked entry and the audit stream: the status, the placement per
GPU (worker, GPU, claim in GiB, ``--mem-fraction-static``), the why-not funnel
of an unplaced request (the filters, then the strategies, with their reason
codes) and the request's event timeline. :func:`render_description` prints it
for a terminal; ``--json`` prints the gathered dict.

The timeline is read from the audit stream starting shortly before the
record was created (stream ids are millisecond times), so describing a
recent request reads only the log's tail; at most :data:`MAX_SCANNED` entries
are read (the timeline says when it stopped early).
"""

from __future__ import annotations

import json
import shutil
import textwrap
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from tasks.base.lifecycle import RecordState
from tasks.base.rows import booked_instance_key
from tasks.edges.text_table import clip, table
from tasks.state.context import Runtime
from tasks.state.streams import iter_stream

GIB = 1 << 30
#: Audit entries read before the timeline gives up (about 5 MB of reading).
MAX_SCANNED = 200_000
#: How far before the record's creation the timeline starts reading (clock skew between hosts).
SKEW_MS = 60_000


def describe_request(rt: Runtime, request_id: str) -> dict[str, Any] | None:
    """Everything known about ``request_id`` (None: unknown, or its record expired)."""
    record = rt.records.record(request_id)
    if not record:
        return None
    result = _result(record)
    parked_raw = rt.client.hget(rt.keys.parked, request_id)
    events, truncated = request_timeline(rt, request_id, int(record.get("created_ms") or 0))
    status = record.get("status") if record.get("state") == RecordState.DONE else None
    return {
        "request_id": request_id,
        "state": record.get("state", ""),
        "status": status or (result or {}).get("status") or "",
        "seq": int(record.get("seq") or 0),
        "attempt": int(record.get("attempt") or 0),
        "created": _iso(record.get("created_ms")),
        "updated": _iso(record.get("updated_ms")),
        "model": _model(record.get("request")),
        "reschedule_of": record.get("replaces") or None,
        "moved_to": record.get("moved_to") or None,
        "instance": record.get("instance") or None,
        "booking_held": bool(rt.client.hexists(rt.keys.instance_meta, booked_instance_key(request_id))),
        "placement": placement_rows(result) if result and result.get("status") == "scheduled" else [],
        "why_not": why_not(result, json.loads(parked_raw) if parked_raw else None),
        "events": events,
        "events_truncated": truncated,
        "history_trimmed": None if _received(events) else trimmed_note(rt),
    }


def _received(events: list[dict[str, Any]]) -> bool:
    return any(event["type"] == "sched.request.received" for event in events)


def trimmed_note(rt: Runtime) -> str | None:
    """A line saying the log was trimmed behind a checkpoint (None: it never was).

    Asked when a timeline lacks the request's first event
    (``sched.request.received``): the retention pass trims the audit log behind
    its oldest kept checkpoint (``gpusched:audit:state`` keeps where), and a
    request older than that has lost the start of its timeline
    (``gpusched replay --archive`` reads the archived part).
    """
    stored = rt.client.hmget(rt.keys.audit_state, ["trimmed_at", "trimmed_version"])
    trimmed_at, version = (str(value) if value is not None else None for value in stored)
    if not trimmed_at:
        return None
    trimmed_ms = int(trimmed_at.split("-", 1)[0])
    where = (f"archived in {rt.settings.audit_archive_dir}" if rt.settings.audit_archive_dir
             else "not archived (audit_archive_dir is not set)")
    return (f"history before {_iso(trimmed_ms)} was trimmed behind the audit checkpoint at cluster version "
            f"{version or '?'}: the earlier events of this request are {where}")


def _result(record: Mapping[str, str]) -> dict[str, Any] | None:
    text = record.get("result") or record.get("notice")
    value = json.loads(text) if text else None
    return value if isinstance(value, dict) else None


def _model(request_json: str | None) -> dict[str, Any]:
    request = json.loads(request_json) if request_json else {}
    model = request.get("model") if isinstance(request, dict) else None
    if not isinstance(model, dict):
        return {}
    keys = ("name", "backend", "backend_parameters", "replicas", "worker_selector", "policy")
    return {key: model[key] for key in keys if model.get(key) not in (None, [], {})}


def _iso(ms: Any) -> str | None:
    if ms in (None, ""):
        return None
    return datetime.fromtimestamp(int(ms) / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# ------------------------------------------------------------------ placement
def placement_rows(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per GPU of the selected candidate (main worker, then subordinates)."""
    selected = result.get("selected")
    candidates = result.get("candidates") or []
    if selected is None or not 0 <= selected < len(candidates):
        return []
    chosen = candidates[selected]
    rows = list(_gpu_rows(chosen, "main"))
    for follower in chosen.get("subordinate_workers") or []:
        rows.extend(_gpu_rows(follower, "subordinate"))
    return rows


def _gpu_rows(node: Mapping[str, Any], role: str) -> Iterator[dict[str, Any]]:
    claim = node.get("computed_resource_claim") or {}
    vram = claim.get("vram") or {}
    for index in node.get("gpu_indexes") or []:
        amount = int(vram.get(str(index), 0))
        yield {
            "worker_id": node.get("worker_id"),
            "worker": node.get("worker_name"),
            "role": role,
            "gpu_type": node.get("gpu_type"),
            "gpu_index": index,
            "claim_bytes": amount,
            "claim_gib": round(amount / GIB, 2),
            "fraction": claim.get("vram_utilization"),
        }


# -------------------------------------------------------------------- why not
def why_not(result: Mapping[str, Any] | None, parked: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The funnel of a decision that placed nothing: filters, then strategies (None when placed)."""
    if result is None or (result.get("status") == "scheduled" and parked is None):
        return None
    error = result.get("error")
    return {
        "blocked_by": result.get("blocked_by"),
        "filters": list(result.get("filter_messages") or []),
        "strategies": [
            {key: event.get(key) for key in ("level", "action", "reason", "message")}
            for event in result.get("events") or []
        ],
        "messages": list(result.get("messages") or []),
        "workers_failed": list(result.get("failures") or []),
        "error": error,
        "parked_reasons": list(parked.get("reasons") or []) if parked else [],
        "parked_since": _iso(parked.get("parked_ms")) if parked else None,
    }


# ------------------------------------------------------------------- timeline
def request_timeline(rt: Runtime, request_id: str, created_ms: int) -> tuple[list[dict[str, Any]], bool]:
    """The request's audit events in order, and whether reading stopped at :data:`MAX_SCANNED`."""
    start = f"{max(created_ms - SKEW_MS, 0)}-0" if created_ms else "-"
    instance = booked_instance_key(request_id)
    events: list[dict[str, Any]] = []
    for scanned, (entry_id, fields) in enumerate(iter_stream(rt.client, rt.keys.events, start)):
        if scanned >= MAX_SCANNED:
            return events, True
        if fields.get("request_id") == request_id or _releases(fields, instance):
            data = json.loads(fields.get("data") or "{}")
            events.append({
                "id": entry_id, "time": fields.get("time", ""), "type": fields.get("type", ""),
                "cluster_version": fields.get("cluster_version") or None,
                "detail": event_detail(fields.get("type", ""), data),
            })
    return events, False


def _releases(fields: Mapping[str, str], instance: str) -> bool:
    if fields.get("type") != "sched.instance.released" or instance not in fields.get("data", ""):
        return False
    released = json.loads(fields["data"]).get("released") or []
    return any(item.get("key") == instance for item in released if isinstance(item, dict))


def _reasons(data: Mapping[str, Any]) -> str:
    return ",".join(data.get("reasons") or []) or "-"


#: One-line summaries of the event types a request's timeline holds.
_DETAILS: dict[str, Any] = {
    "sched.request.received": lambda d: "rescheduled from " + d["reschedule_of"] if d.get("reschedule_of")
    else f"digest {str(d.get('digest', ''))[:12]}",
    "sched.request.duplicate": lambda d: f"submitted again (state {d.get('state')})",
    "sched.request.conflict": lambda d: f"another request under this id: digest {str(d.get('digest'))[:12]}"
    f" vs stored {str(d.get('stored_digest'))[:12]}",
    "sched.decision.made": lambda d: f"{(d.get('outcome') or {}).get('status')} -> {d.get('action')}"
    f" (seq {d.get('seq')}, attempt {d.get('attempt')}, cluster v{d.get('cluster_version')},"
    f" reasons {_reasons(d)})",
    "sched.reservation.booked": lambda d: f"booked {d.get('instance_key')}",
    "sched.reservation.conflicted": lambda d: f"attempt {d.get('attempt')}:"
    f" {len(d.get('gpus') or [])} GPU(s) short",
    "sched.request.retried": lambda d: f"attempt {d.get('attempt')} after {d.get('delay_ms')} ms",
    "sched.result.published": lambda d: f"{d.get('status')} (results {d.get('results_id')})",
    "sched.request.rejected": lambda d: json.dumps(d.get("error"), sort_keys=True),
    "sched.request.parked": lambda d: f"waits for: {_reasons(d)}",
    "sched.request.woken": lambda d: "by " + (d["by"] if isinstance(d.get("by"), str)
                                             else ",".join(str(b.get("kind")) for b in d.get("by") or [])),
    "sched.request.redriven": lambda d: f"re-driven (state {d.get('state')}, #{d.get('redrives')})",
    "sched.request.dead_lettered": lambda d: f"{d.get('reason')}: {d.get('detail')}",
    "sched.request.cancelled": lambda d: f"withdrawn by {d.get('by')} (was {d.get('state')})",
    "sched.instance.released": lambda d: f"booking released ({d.get('reason')})",
    "sched.instance.rescheduled": lambda d: f"replaces {d.get('from_request')} ({d.get('reason')})",
}


def event_detail(event_type: str, data: Mapping[str, Any]) -> str:
    """A one-line summary of one event's data."""
    summary = _DETAILS.get(event_type)
    if summary is None:
        return json.dumps(dict(data), sort_keys=True)[:200]
    return str(summary(data))


# ------------------------------------------------------------------ rendering
def render_description(info: Mapping[str, Any], width: int | None = None) -> str:
    """The description as aligned text for a terminal (no line wider than ``width``)."""
    width = width or shutil.get_terminal_size((110, 24)).columns
    lines = _header(info)
    if info["placement"]:
        lines += ["", "Placement:", *table(
            ["WORKER", "ROLE", "GPU", "CLAIM GiB", "FRACTION"],
            [[f"{r['worker']} (#{r['worker_id']})", r["role"], f"{r['gpu_type']}:{r['gpu_index']}",
              f"{r['claim_gib']:.2f}", "-" if r["fraction"] is None else f"{r['fraction']:.4g}"]
             for r in info["placement"]], right={3, 4})]
    if info["why_not"]:
        lines += ["", "Why not placed:", *_funnel(info["why_not"], width)]
    lines += ["", "Events:"]
    if info.get("history_trimmed"):
        lines.append(f"  ({info['history_trimmed']})")
    lines += [*table(
        ["TIME", "TYPE", "DETAIL"],
        [[e["time"][11:23], e["type"].removeprefix("sched."), e["detail"]] for e in info["events"]])]
    if info["events_truncated"]:
        lines.append(f"  (stopped after reading {MAX_SCANNED} audit entries)")
    return "\n".join(clip(line, width) for line in lines)


def _header(info: Mapping[str, Any]) -> list[str]:
    model = info["model"]
    params = " ".join(model.get("backend_parameters") or []) or "-"
    fields = [
        ("Request", info["request_id"]),
        ("Status", f"{info['status'] or '-'} (state {info['state']}, seq {info['seq']},"
                   f" attempt {info['attempt']})"),
        ("Model", f"{model.get('name', '-')}  backend {model.get('backend', '-')}  params {params}"),
        ("Created", info["created"] or "-"),
        ("Updated", info["updated"] or "-"),
        ("Reschedule of", info["reschedule_of"] or "-"),
        ("Moved to", info["moved_to"] or "-"),
        ("Booking", f"{info['instance']} ({'held' if info['booking_held'] else 'released'})"
         if info["instance"] else "-"),
    ]
    return [f"{name + ':':<15}{value}" for name, value in fields]


def _funnel(funnel: Mapping[str, Any], width: int) -> list[str]:
    lines: list[str] = []
    if funnel.get("error"):
        error = funnel["error"]
        lines.append(f"  Rejected:      {error.get('field') or '-'}: {error.get('message')}")
    if funnel.get("parked_reasons"):
        reasons = ", ".join(funnel["parked_reasons"])
        lines.append(f"  Waiting for:   {reasons} (since {funnel['parked_since']})")
    blocked = funnel.get("blocked_by") or "-"
    lines.append(f"  Blocked by:    {blocked} (the first filter that left no worker)")
    lines.append("  Filters:")
    lines += [f"    {line}" for message in funnel["filters"] for line in message.splitlines()] or ["    -"]
    lines.append("  Strategies (in order; the reason code in brackets):")
    for strategy in funnel["strategies"]:
        lines.append(f"    [{strategy['reason'] or '-'}] {strategy['action'] or ''}".rstrip())
        message = " ".join(str(strategy["message"] or "").split())
        lines += textwrap.wrap(message, max(width - 8, 40), initial_indent=" " * 8, subsequent_indent=" " * 8)
    if not funnel["strategies"]:
        lines.append("    -")
    return lines + _workers_failed(funnel.get("workers_failed") or [])


def _workers_failed(failures: list[Mapping[str, Any]]) -> list[str]:
    """Per stage and reason, how many workers failed and the first few (``why not worker 7``)."""
    if not failures:
        return []
    head = "  Workers failed (per stage and reason: how many, the first few):"
    return [head, *(f"    {f.get('stage')} [{f.get('reason')}]: {_failed_workers(f)}" for f in failures)]


def _failed_workers(failure: Mapping[str, Any]) -> str:
    examples = failure.get("examples") or []
    count = int(failure.get("workers") or 0)
    named = ", ".join(f"{ref.get('name')} (id {ref.get('id')})" for ref in examples)
    more = f", and {count - len(examples)} more" if count > len(examples) else ""
    return f"{count} ({named}{more})"
