"""``gpusched cluster show``: every worker and GPU with its memory, and the parked queue by reason.

:func:`cluster_view` reads, in one pass, the workers, the ledger (capacity and
booked bytes per GPU, the numbers the service books against), the outage
clocks and the parked requests. Per GPU it reports *total* (what the worker
reports), *allocatable* (the ledger's capacity: total minus the worker's
reserved VRAM), *booked* and *free* (allocatable − booked, negative when a
GPU shrank below what is booked on it). :func:`render_cluster` prints a
summary, one line per worker (``--gpus``: one per GPU as well) and the parked
queue; filters (``--worker``, ``--gpu-type``, ``--state``), a sort order and
``--limit`` keep a 2,000-worker cluster readable.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler_core import Gpu, Worker
from tasks.edges.text_table import clip, table
from tasks.runtime.context import Runtime
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
    """

    worker: str | None = None
    gpu_type: str | None = None
    state: str | None = None

    def keeps_worker(self, worker: Worker) -> bool:
        """Whether ``worker`` passes the worker and state filters."""
        down = self.state == "down" and worker.state != "ready"
        if self.state and not (worker.state == self.state or down):
            return False
        if self.worker is None:
            return True
        return self.worker == str(worker.id) or fnmatch.fnmatchcase(worker.name, self.worker)

    def keeps_gpu(self, gpu: Gpu) -> bool:
        """Whether a GPU passes the GPU-type filter (its type or name contains it)."""
        if not self.gpu_type:
            return True
        wanted = self.gpu_type.lower()
        return any(wanted in (text or "").lower() for text in (gpu.type, gpu.name))


def cluster_view(rt: Runtime, filters: Filters = Filters()) -> dict[str, Any]:
    """The cluster as an operator sees it (JSON-ready)."""
    version, _, rows, _, _ = rt.cluster.read_state()
    capacity, booked = rt.cluster.ledger()
    health = {int(k): json.loads(v) for k, v in rt.client.hgetall(rt.keys.health).items()}
    now = rt.partition.now_ms()
    workers = []
    for raw in rows.values():
        worker = Worker.model_validate_json(raw)
        if filters.keeps_worker(worker):
            shown = _worker(worker, capacity, booked, health.get(worker.id) or {}, now, filters)
            if shown["gpus"] or not filters.gpu_type:
                workers.append(shown)
    workers.sort(key=lambda w: w["id"])
    return {
        "version": version,
        "summary": _summary(workers),
        "workers": workers,
        "parked": parked_by_reason(rt.parked.entries(), now),
    }


def _worker(
    worker: Worker, capacity: Mapping[str, int], booked: Mapping[str, int], clocks: Mapping[str, Any],
    now: int, filters: Filters,
) -> dict[str, Any]:
    gpus: list[dict[str, Any]] = []
    for gpu in worker.gpus:
        index = gpu.index
        if index is None or not filters.keeps_gpu(gpu):
            continue
        key = gpu_key(worker.id, gpu.type, index)
        allocatable = capacity.get(key, 0)
        held = booked.get(key, 0)
        gpus.append({
            "key": key, "type": gpu.type, "index": index, "name": gpu.name,
            "total": gpu.total, "allocatable": allocatable,
            "booked": held, "free": allocatable - held, "overbooked": held > allocatable,
        })
    down_since = clocks.get("down_since_ms")
    return {
        "id": worker.id, "name": worker.name, "state": worker.state,
        "down_for_s": round((now - down_since) / 1000) if down_since and worker.state != "ready" else None,
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
                   width: int | None = None) -> str:
    """The view as text: summary, worker table (with ``gpus``, a row per GPU), parked queue.

    Workers are ordered and cut as :func:`arrange` does.
    """
    width = width or shutil.get_terminal_size((110, 24)).columns
    s = view["summary"]
    lines = [
        f"Cluster version {view['version']}: {s['workers']} workers ({s['ready']} ready, "
        f"{s['not_ready']} not ready), {s['gpus']} GPUs",
        f"Memory (GiB): total {_gib(s['total'])}, allocatable {_gib(s['allocatable'])}, "
        f"booked {_gib(s['booked'])}, free {_gib(s['free'])}"
        + (f"; {s['overbooked_gpus']} GPU(s) OVERBOOKED" if s["overbooked_gpus"] else ""),
        "",
    ]
    workers = view["workers"]
    shown = arrange(view, sort, limit)["workers"]
    rows: list[list[object]] = []
    for w in shown:
        rows.append(_worker_row(w))
        if gpus:
            rows.extend(_gpu_row(g) for g in w["gpus"])
    headers = ["ID", "NAME", "STATE", "GPUS", "TOTAL", "ALLOC", "BOOKED", "FREE", "BEST", "NOTE"]
    lines += table(headers, rows, right={0, 4, 5, 6, 7, 8})
    if len(shown) < len(workers):
        lines.append(f"  ... {len(workers) - len(shown)} more workers (--limit)")
    lines += ["", "  (GiB; BEST = most free on one GPU; ! = not ready)", "", "Parked requests by reason:"]
    lines += table(["REASON", "COUNT", "OLDEST", "EXAMPLES"],
                   [[p["reason"], p["count"], _duration(p["oldest_s"]), ", ".join(p["examples"])
                     + (" ..." if p["count"] > len(p["examples"]) else "")] for p in view["parked"]],
                   right={1, 2})
    return "\n".join(clip(line, width) for line in lines)


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


def _gpu_row(g: Mapping[str, Any]) -> list[object]:
    note = "OVERBOOKED" if g["overbooked"] else str(g["name"] or "")
    return ["", f"  {g['type']}:{g['index']}", "", "", _gib(g["total"]), _gib(g["allocatable"]),
            _gib(g["booked"]), _gib(g["free"]), "", note]


def _short(text: str, size: int) -> str:
    return text if len(text) <= size else text[: size - 1] + "…"
