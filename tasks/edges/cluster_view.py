"""``gpusched cluster show`` and the console's map: every worker and GPU, who holds it, the parked queue.

:func:`cluster_view` reads, in one pass, the workers, the ledger (capacity and
booked bytes per GPU, the numbers the service books against), the outage
clocks, the parked requests and whether rescheduling is suspended; with
``holders`` also the claims (:mod:`tasks.edges.holders`). Per GPU it reports
*total* (what the worker reports), *allocatable* (the ledger's capacity:
total minus the worker's reserved VRAM), *booked* and *free* (allocatable −
booked, negative when a GPU shrank below what is booked on it), *used* (what
the worker reports in use, when it does) and *outside* (used beyond what is
booked: memory the ledger does not know of). :func:`render_cluster` prints a
summary, one line per worker (``--gpus``: one per GPU as well;
``--holders``: what holds each GPU) and the parked queue; filters
(``--worker``, ``--gpu-type``, ``--state``, ``--label``), a sort order and
``--limit`` keep a 2,000-worker cluster readable.

Stored worker rows were validated when they were written, so they are read
as plain JSON here (no model validation: a 2,000 × 8 cluster is read in tens
of milliseconds).
"""

from __future__ import annotations

import fnmatch
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tasks.edges.holders import Holder, gpu_holders
from tasks.edges.text_table import clip, table
from tasks.state.context import Runtime
from tasks.state.ledger import gpu_key

GIB = 1 << 30
#: Request ids listed per parked reason.
EXAMPLES = 3


@dataclass(frozen=True, slots=True)
class Filters:
    """Which workers and GPUs to show.

    Attributes:
        worker: a worker id, a name, or a shell pattern on names (``node-00*``); None for all.
        gpu_type: GPUs whose type (``cuda``, ``rocm``) or name (``H100``) contains this
            (case-insensitive).
        state: only workers in this state (``ready``, ``not_ready``, ``unreachable``), or
            ``down`` (any state but ready).
        label: ``key=value`` (the worker has that label) or ``key`` (it has the key).
    """

    worker: str | None = None
    gpu_type: str | None = None
    state: str | None = None
    label: str | None = None

    def keeps_worker(self, worker: Mapping[str, Any]) -> bool:
        """Whether a stored worker row passes the worker, state and label filters."""
        state = worker.get("state")
        down = self.state == "down" and state != "ready"
        if self.state and not (state == self.state or down):
            return False
        if self.label and not _has_label(worker.get("labels") or {}, self.label):
            return False
        if self.worker is None:
            return True
        name = str(worker.get("name"))
        return self.worker == str(worker.get("id")) or fnmatch.fnmatchcase(name, self.worker)

    def keeps_gpu(self, device: Mapping[str, Any]) -> bool:
        """Whether a stored GPU device passes the GPU-type filter (its type or name contains it)."""
        if not self.gpu_type:
            return True
        wanted = self.gpu_type.lower()
        return any(wanted in str(device.get(key) or "").lower() for key in ("type", "name"))


def _has_label(labels: Mapping[str, Any], wanted: str) -> bool:
    key, sep, value = wanted.partition("=")
    if key not in labels:
        return False
    return not sep or str(labels[key]) == value


@dataclass(frozen=True, slots=True)
class _Reads:
    """What one view reads from Redis (the claims only with holders)."""

    version: int
    rows: dict[str, str]
    capacity: dict[str, int]
    booked: dict[str, int]
    health: dict[int, dict[str, Any]]
    vanished: dict[str, str]
    suspended: str | None
    holders: dict[str, list[Holder]]


def _read(rt: Runtime, holders: bool) -> _Reads:
    k = rt.keys
    pipe = rt.client.pipeline(transaction=True)
    for command, key in (("get", k.version), ("hgetall", k.workers), ("hgetall", k.capacity),
                         ("hgetall", k.booked), ("hgetall", k.health), ("hgetall", k.vanished),
                         ("get", k.reschedule_suspended)):
        getattr(pipe, command)(key)
    version, rows, capacity, booked, health, vanished, suspended = pipe.execute()
    return _Reads(
        version=int(version or 0), rows=dict(rows),
        capacity={key: int(value) for key, value in capacity.items()},
        booked={key: int(value) for key, value in booked.items()},
        health={int(key): json.loads(value) for key, value in health.items()},
        vanished=dict(vanished), suspended=suspended,
        holders=gpu_holders(rt) if holders else {},
    )


def cluster_view(rt: Runtime, filters: Filters = Filters(), *, holders: bool = False) -> dict[str, Any]:
    """The cluster as an operator sees it (JSON-ready).

    Args:
        holders: also list what holds each GPU (``gpus[].holders``: instance
            key, request id, bytes), read from the claims.
    """
    reads = _read(rt, holders)
    now = rt.partition.now_ms()
    workers = []
    for raw in reads.rows.values():
        row = json.loads(raw)
        if filters.keeps_worker(row):
            shown = _worker(row, reads, now, filters)
            if shown["gpus"] or not filters.gpu_type:
                workers.append(shown)
    workers.sort(key=lambda w: w["id"])
    return {
        "version": reads.version,
        "summary": _summary(workers),
        "rescheduling": rescheduling_state(reads.suspended),
        "vanished": sorted(int(worker) for worker in reads.vanished),
        "workers": workers,
        "parked": parked_by_reason(rt.parked.entries(), now),
    }


def rescheduling_state(suspended: str | None) -> dict[str, Any]:
    """Whether rescheduling off lost workers is suspended (the mass-outage guard), and the notice's facts."""
    if not suspended:
        return {"suspended": False}
    try:
        notice = json.loads(suspended)
    except ValueError:
        notice = {}
    facts = notice if isinstance(notice, dict) else {}
    keep = ("down", "vanished", "workers", "max_unreachable_fraction")
    return {"suspended": True, **{key: facts[key] for key in keep if key in facts}}


def _gpu(worker_id: int, device: Mapping[str, Any], reads: _Reads) -> dict[str, Any]:
    key = gpu_key(worker_id, device.get("type"), device["index"])
    allocatable = reads.capacity.get(key, 0)
    held = reads.booked.get(key, 0)
    memory = device.get("memory") or {}
    used = memory.get("used")
    gpu = {
        "key": key, "type": device.get("type"), "index": device["index"], "name": device.get("name"),
        "total": int(memory.get("total") or 0), "allocatable": allocatable,
        "booked": held, "free": allocatable - held, "overbooked": held > allocatable,
        "used": int(used) if isinstance(used, int) else None,
        "outside": max(int(used) - held, 0) if isinstance(used, int) else 0,
    }
    if key in reads.holders:
        gpu["holders"] = [holder.to_dict() for holder in reads.holders[key]]
    return gpu


def _worker(row: Mapping[str, Any], reads: _Reads, now: int, filters: Filters) -> dict[str, Any]:
    worker_id = int(row.get("id") or 0)
    gpus = [
        _gpu(worker_id, device, reads)
        for device in (row.get("status") or {}).get("gpu_devices") or []
        if isinstance(device.get("index"), int) and filters.keeps_gpu(device)
    ]
    state = str(row.get("state") or "")
    down_since = (reads.health.get(worker_id) or {}).get("down_since_ms")
    return {
        "id": worker_id, "name": row.get("name"), "state": state, "labels": row.get("labels") or {},
        "down_for_s": round((now - down_since) / 1000) if down_since and state != "ready" else None,
        "gpus": gpus,
        **{field: sum(g[field] for g in gpus) for field in ("total", "allocatable", "booked", "free")},
        "best_free": max((int(g["free"]) for g in gpus), default=0),
    }


def _summary(workers: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    gpus = [g for w in workers for g in w["gpus"]]
    return {
        "workers": len(workers),
        "ready": sum(1 for w in workers if w["state"] == "ready"),
        "not_ready": sum(1 for w in workers if w["state"] != "ready"),
        "gpus": len(gpus),
        "overbooked_gpus": sum(1 for g in gpus if g["overbooked"]),
        **{field: sum(g[field] for g in gpus) for field in ("total", "allocatable", "booked", "free")},
    }


def parked_by_reason(entries: Mapping[str, str], now: int) -> list[dict[str, Any]]:
    """Parked requests per reason code (a request waiting for two reasons counts under both)."""
    by_reason: dict[str, list[tuple[int, str]]] = {}
    for request_id, raw in entries.items():
        entry = json.loads(raw)
        for reason in entry.get("reasons") or ["?"]:
            by_reason.setdefault(reason, []).append((int(entry.get("parked_ms") or 0), request_id))
    return [
        {
            "reason": reason, "count": len(waiting),
            "oldest_s": round((now - min(waiting)[0]) / 1000) if min(waiting)[0] else None,
            "examples": [rid for _, rid in sorted(waiting)[:EXAMPLES]],
        }
        for reason, waiting in sorted(by_reason.items(), key=lambda item: (-len(item[1]), item[0]))
    ]


def sort_workers(workers: list[dict[str, Any]], order: str) -> list[dict[str, Any]]:
    """Workers in ``order`` (``id``, ``name``, ``free``, ``booked`` — most first —, or ``state``:
    not ready first).

    Raises:
        KeyError: unknown order.
    """
    keys = {
        "id": lambda w: (w["id"],),
        "name": lambda w: (w["name"], w["id"]),
        "free": lambda w: (-w["free"], w["id"]),
        "booked": lambda w: (-w["booked"], w["id"]),
        "state": lambda w: (w["state"] == "ready", w["state"], w["id"]),
    }
    return sorted(workers, key=keys[order])


def arrange(view: Mapping[str, Any], sort: str = "id", limit: int | None = None) -> dict[str, Any]:
    """``view`` with its workers in ``sort`` order and cut to the first ``limit`` (``--json``).

    The summary and the parked queue stay those of every worker the filters
    kept, as in the text: ``summary.workers`` above ``len(workers)`` says the
    list was cut.

    Raises:
        KeyError: unknown order.
        ValueError: a negative ``limit``.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be 0 or more, not {limit}")
    workers = sort_workers(list(view["workers"]), sort)
    return {**view, "workers": workers[:limit] if limit is not None else workers}


# ------------------------------------------------------------------ rendering
def _gib(amount: int) -> str:
    return f"{amount / GIB:.1f}"


def _duration(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def render_cluster(view: Mapping[str, Any], *, gpus: bool = False, sort: str = "id", limit: int | None = None,
                   width: int | None = None, holders: bool = False) -> str:
    """The view as text: summary, worker table (with ``gpus``, a row per GPU; with ``holders``, a row
    per GPU naming what holds it), parked queue.

    Workers are ordered and cut as :func:`arrange` does.
    """
    width = width or shutil.get_terminal_size((110, 24)).columns
    lines = _summary_lines(view)
    workers = view["workers"]
    shown = arrange(view, sort, limit)["workers"]
    rows: list[list[object]] = []
    for w in shown:
        rows.append(_worker_row(w))
        if gpus or holders:
            rows.extend(_gpu_row(g, holders) for g in w["gpus"])
    last = "HOLDERS (GiB)" if holders else "NOTE"
    headers = ["ID", "NAME", "STATE", "GPUS", "TOTAL", "ALLOC", "BOOKED", "FREE", "BEST", last]
    lines += table(headers, rows, right={0, 4, 5, 6, 7, 8})
    if len(shown) < len(workers):
        lines.append(f"  ... {len(workers) - len(shown)} more workers (--limit)")
    lines += ["", "  (GiB; BEST = most free on one GPU; ! = not ready)", "", "Parked requests by reason:"]
    lines += table(["REASON", "COUNT", "OLDEST", "EXAMPLES"],
                   [[p["reason"], p["count"], _duration(p["oldest_s"]), ", ".join(p["examples"])
                     + (" ..." if p["count"] > len(p["examples"]) else "")] for p in view["parked"]],
                   right={1, 2})
    return "\n".join(clip(line, width) for line in lines)


def _summary_lines(view: Mapping[str, Any]) -> list[str]:
    s = view["summary"]
    lines = [
        f"Cluster version {view['version']}: {s['workers']} workers ({s['ready']} ready, "
        f"{s['not_ready']} not ready), {s['gpus']} GPUs",
        f"Memory (GiB): total {_gib(s['total'])}, allocatable {_gib(s['allocatable'])}, "
        f"booked {_gib(s['booked'])}, free {_gib(s['free'])}"
        + (f"; {s['overbooked_gpus']} GPU(s) OVERBOOKED" if s["overbooked_gpus"] else ""),
    ]
    rescheduling = view.get("rescheduling") or {}
    if rescheduling.get("suspended"):
        lines.append(suspension_line(rescheduling))
    return [*lines, ""]


def suspension_line(rescheduling: Mapping[str, Any]) -> str:
    """One line saying rescheduling is suspended, and why (the mass-outage guard's notice)."""
    down, vanished, total = (rescheduling.get(key) for key in ("down", "vanished", "workers"))
    share = f": {down} down and {vanished} vanished of {total} workers" if total else ""
    limit = rescheduling.get("max_unreachable_fraction")
    above = f", above max_unreachable_fraction {limit:g}" if isinstance(limit, int | float) else ""
    return f"Rescheduling SUSPENDED{share}{above} (placements on lost workers are not moved)"


def _worker_row(w: Mapping[str, Any]) -> list[object]:
    types = sorted({str(g["type"]) for g in w["gpus"]})
    notes = []
    if w["state"] != "ready":
        notes.append(f"{w['state']} for {_duration(w['down_for_s'])}" if w["down_for_s"] is not None
                     else w["state"])
    overbooked = sum(1 for g in w["gpus"] if g["overbooked"])
    if overbooked:
        notes.append(f"{overbooked} GPU(s) OVERBOOKED")
    mark = "" if w["state"] == "ready" else "!"
    kinds = f"{len(w['gpus'])}x{'/'.join(types) or '-'}"
    memory = [_gib(w[field]) for field in ("total", "allocatable", "booked", "free", "best_free")]
    return [w["id"], _short(f"{mark}{w['name']}", 28), w["state"], kinds, *memory, "; ".join(notes)]


def _gpu_row(g: Mapping[str, Any], holders: bool = False) -> list[object]:
    note = "OVERBOOKED" if g["overbooked"] else str(g["name"] or "")
    if holders:
        held = ", ".join(f"{h['request_id'] or h['instance']} {_gib(h['bytes'])}"
                         for h in g.get("holders") or [])
        outside = f"outside {_gib(g['outside'])}" if g.get("outside") else ""
        flag = "OVERBOOKED" if g["overbooked"] else ""
        note = "; ".join(part for part in (held or "-", outside, flag) if part)
    return ["", f"  {g['type']}:{g['index']}", "", "", _gib(g["total"]), _gib(g["allocatable"]),
            _gib(g["booked"]), _gib(g["free"]), "", note]


def _short(text: str, size: int) -> str:
    return text if len(text) <= size else text[: size - 1] + "…"
