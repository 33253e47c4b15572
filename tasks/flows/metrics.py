"""Domain metrics (``prometheus-client``): what the service decided, how fast, and its state in Redis.

Two kinds, both served by each worker node on ``/metrics``
(:mod:`tasks.runtime.middleware.metrics_server`):

* **Events counted where they happen**, in whichever process of the worker
  node handles them (prefork pool processes included, and the main process,
  where the broker door dead-letters what it refuses): decisions by status,
  the decide task's duration, submit → terminal result latency, reservation
  conflicts, wake-ups, reschedules and dead letters. A worker node keeps them
  in ``prometheus-client``'s multiprocess mode (one directory of memory-mapped
  files per node, prepared by :func:`prepare_multiprocess` before the pool
  forks), so the node's endpoint sums every pool process. Counters restart
  at zero with the node, as Prometheus expects.
* **State read from Redis at scrape time** (:func:`state_families`): parked
  requests by reason, the cluster version, worker nodes' heartbeat and
  drainer ages, GPUStack workers by state, dead-letter entries and
  overbooked GPUs. These are the partition's, so every node reports the same
  values (aggregate them with ``max``, not ``sum``).

The metric objects are created on first use (:func:`domain`), after
:func:`prepare_multiprocess` has chosen the mode: ``prometheus-client`` picks
its value store when it is first imported. Outside a worker node (clients,
tests) they count in this process's default registry and are never served.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections import Counter as Tally
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import Counter, Histogram
    from prometheus_client.core import Metric

    from tasks.state.context import Runtime

#: The environment variable ``prometheus-client`` reads to count across processes.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: Decision (decide task) durations: the core takes ~2 ms, a task ~5–10 ms, a lease wait up to seconds.
DECISION_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Submit → terminal result: milliseconds when placed at once, minutes or hours when parked first.
RESULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0, 3600.0, 86400.0)


@dataclass(frozen=True, slots=True)
class DomainMetrics:
    """The counters and histograms of one process."""

    decisions: Counter
    decision_seconds: Histogram
    submit_to_result_seconds: Histogram
    conflicts: Counter
    wakeups: Counter
    reschedules: Counter
    dead_letters: Counter


_DOMAIN: list[DomainMetrics] = []


def prepare_multiprocess(node_dir: str | None = None) -> str:
    """Choose the multiprocess directory of this worker node and empty it (before the pool forks).

    Uses ``$PROMETHEUS_MULTIPROC_DIR`` when set (it must be this node's own
    directory: its ``*.db`` files are deleted), else a new temporary directory,
    which is exported so the pool processes inherit it.

    Returns:
        The directory.
    """
    folder = node_dir or os.environ.get(MULTIPROC_ENV) or tempfile.mkdtemp(prefix="gpusched-metrics-")
    Path(folder).mkdir(parents=True, exist_ok=True)
    for stale in Path(folder).glob("*.db"):  # a previous run's counts must not be summed in
        stale.unlink(missing_ok=True)
    os.environ[MULTIPROC_ENV] = folder
    return folder


def remove_multiprocess_dir(folder: str) -> None:
    """Delete a temporary directory :func:`prepare_multiprocess` created (on node shutdown)."""
    if Path(folder).name.startswith("gpusched-metrics-"):
        shutil.rmtree(folder, ignore_errors=True)


def domain() -> DomainMetrics:
    """This process's metric objects (created on first use)."""
    if not _DOMAIN:
        from prometheus_client import Counter, Histogram

        _DOMAIN.append(DomainMetrics(
            decisions=Counter("gpusched_decisions", "Decisions made, by the core's status", ["status"]),
            decision_seconds=Histogram(
                "gpusched_decision_seconds", "Duration of one decide task (claim, core, book, publish)",
                buckets=DECISION_BUCKETS,
            ),
            submit_to_result_seconds=Histogram(
                "gpusched_submit_to_result_seconds", "From a request's acceptance to its terminal result",
                buckets=RESULT_BUCKETS,
            ),
            conflicts=Counter("gpusched_reservation_conflicts", "Reservations that found a GPU taken"),
            wakeups=Counter("gpusched_wakeups", "Parked requests woken for a new decision"),
            reschedules=Counter("gpusched_reschedules", "Bookings moved off a lost worker as new requests"),
            dead_letters=Counter("gpusched_dead_letters", "Messages dead-lettered, by reason", ["reason"]),
        ))
    return _DOMAIN[0]


# ------------------------------------------------------------- counting hooks
def count_decision(status: str) -> None:
    """One decision made by the core (``scheduled``, ``unschedulable``, ``rejected``)."""
    domain().decisions.labels(status=status).inc()


def observe_decision(seconds: float) -> None:
    """One decide task's duration."""
    domain().decision_seconds.observe(seconds)


def observe_submit_to_result(seconds: float) -> None:
    """A terminal result published this long after the request was accepted."""
    domain().submit_to_result_seconds.observe(max(seconds, 0.0))


def count_conflict() -> None:
    """A reservation found a GPU already taken."""
    domain().conflicts.inc()


def count_wakeups(woken: int) -> None:
    """Parked requests queued for a new decision."""
    if woken:
        domain().wakeups.inc(woken)


def count_reschedule() -> None:
    """A booking on a lost worker got a new request."""
    domain().reschedules.inc()


def count_dead_letter(reason: str) -> None:
    """A message was dead-lettered."""
    domain().dead_letters.labels(reason=reason).inc()


# ----------------------------------------------------------- state at scrape
#: Longest GPU name kept as a label value (names come from the workers: untrusted, unbounded).
GPU_NAME_LABEL_CHARS = 64


def state_families(rt: Runtime) -> Iterator[Metric]:
    """Gauges read from the partition's Redis now (raises a Redis error when unreachable).

    Two round trips: one pipeline for the hashes, streams and queues, and the
    ledger (read atomically by :meth:`~tasks.state.cluster_store.ClusterStore.ledger`).
    """
    from prometheus_client.core import GaugeMetricFamily

    k = rt.keys
    pipe = rt.client.pipeline(transaction=False)
    pipe.hvals(k.parked)
    pipe.get(k.version)
    pipe.hgetall(k.nodes)
    pipe.xlen(k.deadletter)
    pipe.hvals(k.workers)
    pipe.zcard(k.outbox)
    pipe.exists(k.reschedule_suspended)
    pipe.exists(k.data_lost)
    pipe.hlen(k.unacked)
    for queue in k.queues:
        pipe.llen(queue)
    (parked, version, nodes, deadletters, workers, in_flight, suspended, lost, unacked,
     *depths) = pipe.execute()
    capacity, booked = rt.cluster.ledger()
    rows = [json.loads(raw) for raw in workers]

    yield from _parked_families(parked)
    yield GaugeMetricFamily("gpusched_cluster_version", "Cluster version", value=int(version or 0))
    yield from _node_families(nodes, time.time() * 1000)
    yield from _worker_families(rows)
    yield GaugeMetricFamily("gpusched_deadletter_entries", "Entries of the dead-letter stream",
                            value=deadletters)
    yield from _ledger_families(rows, capacity, booked)
    yield from _queue_families(dict(zip(k.queues, depths, strict=True)), in_flight, unacked)
    yield GaugeMetricFamily("gpusched_reschedule_suspended",
                            "1 while rescheduling off lost workers is suspended (mass-outage guard)",
                            value=1 if suspended else 0)
    yield GaugeMetricFamily("gpusched_data_lost",
                            "1 while a detected data loss (wiped or rolled-back Redis) is not recovered",
                            value=1 if lost else 0)


def _parked_families(parked: list[str]) -> Iterator[Metric]:
    from prometheus_client.core import GaugeMetricFamily

    reasons = Tally(reason for raw in parked for reason in json.loads(raw).get("reasons") or ["?"])
    family = GaugeMetricFamily("gpusched_parked_requests", "Parked requests by reason code",
                               labels=["reason"])
    for reason, count in sorted(reasons.items()):
        family.add_metric([reason], count)
    yield family
    yield GaugeMetricFamily("gpusched_parked_requests_total", "Parked requests", value=len(parked))


def _worker_families(rows: list[dict[str, Any]]) -> Iterator[Metric]:
    from prometheus_client.core import GaugeMetricFamily

    states = Tally(str(row.get("state") or "not_ready") for row in rows)
    family = GaugeMetricFamily("gpusched_cluster_workers", "GPUStack workers by state", labels=["state"])
    for state, count in sorted(states.items()):
        family.add_metric([state], count)
    yield family


def _queue_families(depths: dict[str, int], in_flight: int, unacked: int) -> Iterator[Metric]:
    from prometheus_client.core import GaugeMetricFamily

    family = GaugeMetricFamily("gpusched_queue_messages", "Messages waiting on each partition queue",
                               labels=["queue"])
    for queue, depth in sorted(depths.items()):
        family.add_metric([queue], depth)
    yield family
    yield GaugeMetricFamily("gpusched_requests_in_flight",
                            "Accepted requests neither finished nor parked (queued, deciding, retrying)",
                            value=in_flight)
    yield GaugeMetricFamily("gpusched_queue_unacked_messages",
                            "Messages delivered to a worker and not yet acknowledged (kombu's unacked "
                            "hash; unpartitioned it holds every partition of the database)", value=unacked)


def _ledger_families(rows: list[dict[str, Any]], capacity: dict[str, int],
                     booked: dict[str, int]) -> Iterator[Metric]:
    from prometheus_client.core import GaugeMetricFamily

    from tasks.state.ledger import overbooked

    over = overbooked(capacity, booked)
    yield GaugeMetricFamily("gpusched_ledger_overbooked_gpus", "GPUs booked past capacity", value=len(over))
    yield GaugeMetricFamily("gpusched_ledger_overbooked_bytes", "Bytes booked past capacity",
                            value=sum(held - cap for held, cap in over.values()))
    free = GaugeMetricFamily("gpusched_free_bytes", "Bookable bytes left on ready workers, per GPU type "
                             "and name", labels=["gpu_type", "gpu_name"])
    largest = GaugeMetricFamily("gpusched_largest_free_bytes", "The most bookable bytes left on one GPU "
                                "of a ready worker, per GPU type and name", labels=["gpu_type", "gpu_name"])
    gpus = GaugeMetricFamily("gpusched_gpus", "GPUs of ready workers, per GPU type and name",
                             labels=["gpu_type", "gpu_name"])
    for labels, left in sorted(free_by_gpu_kind(rows, capacity, booked).items()):
        free.add_metric(list(labels), sum(left))
        largest.add_metric(list(labels), max(left))
        gpus.add_metric(list(labels), len(left))
    yield free
    yield largest
    yield gpus


def free_by_gpu_kind(rows: list[dict[str, Any]], capacity: dict[str, int],
                     booked: dict[str, int]) -> dict[tuple[str, str], list[int]]:
    """Free bytes (capacity − booked, at least 0) of every GPU of a ready worker, by (type, name).

    Rows are stored worker rows (JSON objects); a GPU without a ledger entry
    (no index or memory) is not bookable and not counted.
    """
    from tasks.state.ledger import gpu_key

    kinds: dict[tuple[str, str], list[int]] = {}
    for row in rows:
        if row.get("state") != "ready":
            continue
        for device in (row.get("status") or {}).get("gpu_devices") or []:
            key = gpu_key(row.get("id") or 0, device.get("type"), device.get("index") or 0)
            if key not in capacity:
                continue
            name = str(device.get("name") or "")[:GPU_NAME_LABEL_CHARS]
            left = max(capacity[key] - booked.get(key, 0), 0)
            kinds.setdefault((str(device.get("type") or ""), name), []).append(left)
    return kinds


def _node_families(nodes: dict[str, str], now_ms: float) -> Iterator[Metric]:
    from prometheus_client.core import GaugeMetricFamily

    beat = GaugeMetricFamily("gpusched_node_heartbeat_age_seconds",
                             "Age of each worker node's heartbeat", labels=["node"])
    drained = GaugeMetricFamily("gpusched_node_drainer_age_seconds",
                                "Age of each worker node's last drainer pass, as its last heartbeat "
                                "reported it (lags by up to one heartbeat period)", labels=["node"])
    for node, raw in sorted(nodes.items()):
        data: dict[str, Any] = json.loads(raw)
        beat.add_metric([node], max(now_ms - float(data.get("seen_ms") or 0), 0) / 1000)
        if data.get("drained_ms"):
            drained.add_metric([node], max(now_ms - float(data["drained_ms"]), 0) / 1000)
    yield beat
    yield drained


# ------------------------------------------------------------ this node, no Redis
def build_version() -> str:
    """The installed gpusched version (``unknown`` for a source tree that is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpusched")
    except PackageNotFoundError:
        return "unknown"


def node_families() -> Iterator[Metric]:
    """What the serving node knows without Redis: build info and its own drainer's last pass.

    ``gpusched_drainer_age_seconds`` is this node's drainer as ``/healthz``
    checks it (in-process, exact); ``gpusched_node_drainer_age_seconds`` is
    every node's as read from Redis, up to a heartbeat older.
    """
    import platform

    from prometheus_client.core import GaugeMetricFamily

    from tasks.base import liveness
    info = GaugeMetricFamily("gpusched_build_info", "The running gpusched build (value 1)",
                             labels=["version", "python"])
    info.add_metric([build_version(), platform.python_version()], 1)
    yield info
    last = liveness.last_pass(liveness.DRAINER)
    if last is not None:
        yield GaugeMetricFamily("gpusched_drainer_age_seconds",
                                "Age of this node's last drainer pass (exact: what /healthz checks)",
                                value=max(time.time() - last, 0.0))
