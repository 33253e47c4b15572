"""What each console page shows, read from Redis with the same code as the CLI (read only).

* the cluster map: :func:`map_data`, :func:`tasks.edges.cluster_view.cluster_view`
  with holders, compacted (GPU kinds and holder names are tables the GPUs index
  into: a 2,000 × 8 cluster is about 1 MB of JSON before gzip);
* one worker: :func:`worker_data` (its GPUs and their holders);
* requests: :func:`tasks.edges.request_list.list_requests`;
* one request: :func:`tasks.edges.describe.describe_request`;
* health and key metrics: :func:`health_data` (``gpusched health``'s checks and
  the gauges a worker node's ``/metrics`` reads from Redis);
* the audit log's replay status: :func:`replay_status`.

Nothing here writes to Redis (the console's Redis user may read only).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from typing import Any, cast

from tasks.edges.cluster_view import Filters, cluster_view, parked_by_reason, rescheduling_state
from tasks.edges.describe import describe_request
from tasks.edges.request_list import ListQuery, list_requests
from tasks.state.context import Runtime

#: Serialises the health checks: the data-generation check keeps the highest version it read per
#: runtime, and two checks interleaving on one runtime could mistake each other's read for a rollback.
_HEALTH_LOCK = threading.Lock()


#: The map is rebuilt at most this often (a busy cluster changes its version with every booking: the
#: page is told the version it got and asks again while the feed shows newer ones).
MIN_REBUILD_S = 0.5
#: The map's parts that change without a cluster version (read at every call, never cached).
_LIVE = ("parked", "rescheduling")


class MapCache:
    """The cluster map, rebuilt only when the cluster version moved (and at most every :data:`MIN_REBUILD_S`).

    Workers, the ledger, the claims and the outage clocks change only with a
    new cluster version (bookings and releases are versioned changes too), so
    a page load on an unchanged cluster costs one ``GET`` plus the parked
    queue and the suspension flag, which change without a version. One build
    at a time, whatever the number of pages (concurrent loads wait for it).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._built: dict[str, Any] | None = None
        self._encoded = b"{}"  # the built map as JSON without its live parts, encoded once per build
        self._built_at = 0.0

    def get(self, rt: Runtime) -> dict[str, Any]:
        """The map as :func:`map_data` builds it, with the parked queue and the suspension read now."""
        built, _ = self._current(rt)
        return {**built, **self._live(rt)}

    def encoded(self, rt: Runtime) -> bytes:
        """:meth:`get` as JSON bytes (what ``/api/map`` sends): the built part is encoded once per
        build (1.5 MB at 2,000 × 8), only the parked queue and the suspension are encoded per call."""
        _, encoded = self._current(rt)
        return encoded[:-1] + b"," + encode_json(self._live(rt))[1:]

    def _current(self, rt: Runtime) -> tuple[dict[str, Any], bytes]:
        version = int(rt.client.get(rt.keys.version) or 0)
        with self._lock:
            stale = self._built is None or self._built["version"] != version
            if stale and (self._built is None or time.monotonic() - self._built_at >= MIN_REBUILD_S):
                self._built = map_data(rt)
                # without the live parts (map_data reads them too): they are encoded per call
                self._encoded = encode_json({k: v for k, v in self._built.items() if k not in _LIVE})
                self._built_at = time.monotonic()
            built, encoded = self._built, self._encoded
        assert built is not None
        return built, encoded

    @staticmethod
    def _live(rt: Runtime) -> dict[str, Any]:
        """What changes without a cluster version: the parked queue, the suspension flag."""
        suspended = cast(str | None, rt.client.get(rt.keys.reschedule_suspended))
        parked = parked_by_reason(rt.parked.entries(), rt.partition.now_ms())
        return {"parked": parked, "rescheduling": rescheduling_state(suspended)}


def encode_json(value: Any) -> bytes:
    """JSON as Starlette's ``JSONResponse`` renders it (compact, UTF-8, no NaN)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode()


def map_data(rt: Runtime) -> dict[str, Any]:
    """The cluster map: every worker and GPU, compact.

    ``workers``: ``{id, name, state, down_for_s, labels, gpus}``; each GPU is
    ``[index, kind, total, allocatable, booked, outside, [[holder, bytes], ...]]``
    where ``kind`` indexes ``kinds`` (``[type, name]``) and ``holder`` indexes
    ``holders`` (``{label, instance, request_id, source, pinned}``).
    """
    view = cluster_view(rt, Filters(), holders=True)
    kinds: dict[tuple[str, str], int] = {}
    holders: dict[str, int] = {}
    holder_rows: list[dict[str, Any]] = []
    workers = []
    for worker in view["workers"]:
        gpus = []
        for gpu in worker["gpus"]:
            kind = kinds.setdefault((str(gpu["type"] or ""), str(gpu["name"] or "")), len(kinds))
            held = []
            for holder in gpu.get("holders") or []:
                if holder["instance"] not in holders:
                    holders[holder["instance"]] = len(holder_rows)
                    holder_rows.append({"label": holder["request_id"] or holder["instance"], **holder})
                held.append([holders[holder["instance"]], holder["bytes"]])
            gpus.append([gpu["index"], kind, gpu["total"], gpu["allocatable"], gpu["booked"],
                         gpu["outside"], held])
        workers.append({"id": worker["id"], "name": worker["name"], "state": worker["state"],
                        "down_for_s": worker["down_for_s"], "labels": worker["labels"], "gpus": gpus})
    for row in holder_rows:
        row.pop("bytes", None)
    return {
        "version": view["version"], "summary": view["summary"], "rescheduling": view["rescheduling"],
        "vanished": view["vanished"], "parked": view["parked"],
        "kinds": [list(kind) for kind in kinds], "holders": holder_rows, "workers": workers,
    }


def worker_data(rt: Runtime, worker: str) -> dict[str, Any] | None:
    """One worker (by id or exact name) with its GPUs and their holders; None if there is none."""
    view = cluster_view(rt, Filters(worker=worker), holders=True)
    exact = [w for w in view["workers"] if str(w["id"]) == worker or w["name"] == worker]
    if not exact:
        return None
    return {"version": view["version"], "rescheduling": view["rescheduling"], "worker": exact[0]}


def requests_data(rt: Runtime, query: ListQuery) -> dict[str, Any]:
    """The requests page: :func:`tasks.edges.request_list.list_requests`."""
    return list_requests(rt, query)


def request_data(rt: Runtime, request_id: str) -> dict[str, Any] | None:
    """One request: what ``gpusched describe`` shows, plus the ids of its placement's workers."""
    return describe_request(rt, request_id)


def health_data(rt: Runtime) -> dict[str, Any]:
    """``gpusched health``'s checks, the worker nodes, and the gauges a scrape reads from Redis."""
    import redis

    from tasks.flows import metrics
    from tasks.runtime.health import DEPLOYMENT_CHECKS, first_failure, run_checks

    with _HEALTH_LOCK:
        verdicts = run_checks(rt, DEPLOYMENT_CHECKS)
    failed = first_failure(verdicts)
    gauges: list[dict[str, Any]] = []
    if failed is None or failed.name != "redis":
        try:
            gauges = [{"name": sample.name, "labels": dict(sample.labels), "value": sample.value}
                      for family in metrics.state_families(rt) for sample in family.samples]
        except redis.RedisError as error:
            gauges = [{"name": "error", "labels": {}, "value": f"{type(error).__name__}: {error}"}]
    return {
        "healthy": failed is None,
        "checks": [{"name": v.name, "ok": v.ok, "detail": v.detail} for v in verdicts],
        "gauges": gauges,
        "build": metrics.build_version(),
    }


def gauge(gauges: list[dict[str, Any]], name: str, **labels: str) -> Any:
    """The value of one gauge sample (None when absent)."""
    for sample in gauges:
        if sample["name"] == name and all(sample["labels"].get(k) == v for k, v in labels.items()):
            return sample["value"]
    return None


def replay_status(rt: Runtime) -> dict[str, Any]:
    """What ``gpusched replay`` would cover now: the log's extent, checkpoints, where it was trimmed.

    Read only (no decision is re-run here: ``gpusched replay`` does that and
    compares digests). ``starts_from_version`` is 0 when the log is whole,
    else the checkpoint the trimmed log replays from (``--archive`` replays the
    archived part too).
    """
    k = rt.keys
    pipe = rt.client.pipeline(transaction=False)
    pipe.xlen(k.events)
    pipe.xrange(k.events, count=1)
    pipe.xrevrange(k.events, count=1)
    pipe.hgetall(k.checkpoints)
    pipe.hmget(k.audit_state, ["trimmed_at", "trimmed_version", "scanned"])
    length, first, last, checkpoints, (trimmed_at, trimmed_version, scanned) = pipe.execute()
    versions = sorted(int(version) for version in checkpoints)
    return {
        "events": int(length),
        "first": first[0][0] if first else None,
        "last": last[0][0] if last else None,
        "checkpoints": versions,
        "trimmed_at": trimmed_at,
        "starts_from_version": int(trimmed_version) if trimmed_version else 0,
        "retention_scanned_to": scanned,
        "archive_dir_set": bool(rt.settings.audit_archive_dir),
    }


def placement_workers(info: Mapping[str, Any]) -> list[int]:
    """Worker ids of a described request's placement, in order (links on the request page)."""
    seen: dict[int, None] = {}
    for row in info.get("placement") or []:
        if isinstance(row.get("worker_id"), int):
            seen.setdefault(row["worker_id"], None)
    return list(seen)
