"""End-to-end service benchmark: decisions/s and submit→result latency.

For 1, 2 and 4 worker processes (each a real ``celery -A tasks.app worker``
with a one-process prefork pool) on a synthetic 500-worker × 8-GPU cluster:
apply the cluster to a fresh Redis database, warm the workers up, then keep
``--inflight`` requests outstanding (closed loop) until ``--requests``
decisions have been published. Latency is measured from ``submit()`` to the
result entry on ``gpusched:results`` (read by a separate blocking reader);
throughput is published results per second of wall time. The reported core
time is the ``elapsed_ms`` the workers recorded in their decision events
(the placement core plus the snapshot sync), to separate the core's cost
from the service's.

    .venv/bin/python bench/bench_service.py                 # 1, 2, 4 workers
    .venv/bin/python bench/bench_service.py --workers 2 --requests 300 --mix tp4
    .venv/bin/python bench/bench_service.py --workers 2 --cluster-workers 2000 --instances 4000

``--batches 0 10 50`` runs a round per batch size for each worker count: 0
sends single ``gpusched.decide`` messages (``submit()``, as before), N sends
the requests N at a time with ``submit_many()`` as ``gpusched.decide_batch``
messages, keeping ``--batch-inflight`` messages per process outstanding.
Latency is still per request, from the ``submit_many()`` call that carried it
to its result.

``--rate R`` adds an open-loop round after every round (a fresh database and
workers, the same warm-up): requests offered at R per second whatever the
service does (a batch of the round's size, or one request, sent every
size ÷ R seconds on a fixed schedule, as a control plane with steady
arrivals sends them), ``--rate-requests`` of them (after ``--rate-warmup`` seconds
of the same load, unmeasured), with each request's latency
from the call that sent it to its result: the p50/p99 at that load, where the
closed loop's latencies only restate how many requests it keeps in flight. It also
splits where the time went, over every request and over the slowest 1 %, from each
request's ``sched.decision.made`` event (its time and ``elapsed_ms``): from sending to
the start of its decision (queued messages, the batch's earlier decisions), deciding,
and from then to its result read (the batch's later decisions, the commit, the read).
With ``--steps`` it also prints, per batch message, the p50 and p99 of the control
plane's ``submit_many`` call and of each step the worker logged on its
``batch_finished`` line (the mirror's sync, the lease and the claims, the decisions,
the commit; the workers log at INFO for that round).

``--instances N`` starts the round with N control-plane instances already
running (small one-GPU models spread over every worker by a seeded generator,
:func:`running_instances`), so the core decides against N + the bench's own
bookings.

``--cpu-split`` (Linux) adds, per round, the CPU time each process spent per
decision during the saturated phase (from ``/proc/<pid>/stat``): this driver
(its ``submit()`` calls and the result reader), ``redis-server``, each worker's
consumer (Celery's main process: receive, ack, hand-over) and its pool
process (the task: middleware, Redis round trips, the core).

Needs ``redis-server`` on PATH (a private server on a free port is started)
unless ``--redis-url`` names one (its database is flushed!).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Container, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

GIB = 1 << 30
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: A Llama-3-8B-like config (32 heads, GQA 8): divisible by tp 1, 2, 4, 8.
HF_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "torch_dtype": "bfloat16",
}

#: Request mixes: tensor-parallel size → share of requests.
MIXES = {
    "mixed": {1: 0.1, 2: 0.3, 4: 0.4, 8: 0.2},
    "tp1": {1: 1.0},
    "tp2": {2: 1.0},
    "tp4": {4: 1.0},
    "tp8": {8: 1.0},
}


def cluster(workers: int, gpus: int) -> dict[str, Any]:
    """A synthetic GPUStack snapshot: ``workers`` ready hosts with ``gpus`` × 80 GiB each."""
    rows = []
    for wid in range(1, workers + 1):
        rows.append({
            "id": wid, "name": f"node-{wid:04d}", "ip": f"10.{wid // 250}.{wid % 250}.1",
            "cluster_id": 1, "state": "ready", "labels": {"gpu": "h100", "rack": f"r{wid % 20}"},
            "system_reserved": {"ram": 0, "vram": 0},
            "status": {
                "memory": {"total": 2048 * GIB},
                "gpu_devices": [
                    {"uuid": f"GPU-{wid}-{i}", "name": "NVIDIA H100 80GB HBM3", "vendor": "nvidia",
                     "type": "cuda", "index": i, "memory": {"total": 80 * GIB}}
                    for i in range(gpus)
                ],
            },
        })
    return {"workers": rows, "model_instances": []}


def running_instances(workers: int, gpus: int, count: int, seed: int = 11) -> list[dict[str, Any]]:
    """``count`` control-plane instances already running when the bench starts.

    Small one-GPU models (4, 8 or 12 GiB claimed of an 80 GiB GPU), spread
    over every worker by a seeded generator: two may share a GPU, so worker
    shapes differ (the core cannot treat the fleet as one shape) while most
    GPUs keep room for the bench's requests (each claims ~67 GiB per GPU).
    """
    rng = random.Random(seed)
    rows = []
    for iid in range(1, count + 1):
        wid = rng.randrange(workers) + 1
        index = rng.randrange(gpus)
        share = rng.choice((0.05, 0.1, 0.15))
        rows.append({
            "id": iid, "name": f"running-{iid}", "model_id": 50_000 + iid % 97,
            "model_name": f"small-{iid % 97}", "backend": "SGLang", "state": "running",
            "worker_id": wid, "worker_name": f"node-{wid:04d}", "gpu_type": "cuda",
            "gpu_indexes": [index],
            "computed_resource_claim": {"vram": {str(index): int(80 * GIB * share)},
                                        "vram_utilization": share},
        })
    return rows


def request(n: int, tp: int, run: str) -> dict[str, Any]:
    """One request of tensor-parallel size ``tp`` (small enough that the cluster has room)."""
    params = [] if tp == 1 else ["--tp-size", str(tp)]
    return {
        "request_id": f"{run}-{n:06d}",
        "model": {
            "id": 1000 + n, "name": f"llama-8b-tp{tp}", "backend": "SGLang",
            "backend_parameters": params, "categories": ["llm"], "cluster_id": 1,
            "hf_config": HF_CONFIG, "weight_bytes": 16 * GIB,
        },
    }


def plan(total: int, mix: dict[int, float], run: str) -> list[dict[str, Any]]:
    """``total`` requests with the mix's tp shares, interleaved deterministically."""
    sizes: list[int] = []
    for tp, share in sorted(mix.items()):
        sizes.extend([tp] * round(total * share))
    sizes = (sizes + [max(mix)] * total)[:total]
    # Position i takes size i × step (mod total): a permutation, as the step is prime. A step of
    # ±1 modulo the total would only keep or reverse the sizes' order (all of one size, then the
    # next: 7919 does that for the totals that divide 7918 or 7920, such as 80 or 2,640), so the
    # next prime that does not is taken there; every other total keeps 7919 and its sequence.
    step = next(prime for prime in _STEPS if (prime % total) not in (1, total - 1)) if total > 2 else 1
    ordered = sorted(range(total), key=lambda i: (i * step) % total)
    return [request(i, sizes[ordered[i]], run) for i in range(total)]


#: Interleaving steps for :func:`plan`, the first that suits a total is used.
_STEPS = (7919, 7927, 7933)


class ResultReader(threading.Thread):
    """Reads ``gpusched:results`` and timestamps each request's first result."""

    def __init__(self, client: Any, stream: str) -> None:
        super().__init__(daemon=True)
        self.client, self.stream = client, stream
        self.seen: dict[str, float] = {}
        self.status: dict[str, str] = {}
        # from the start of the stream (each round flushes the database first): "$" would be
        # re-read as "after now" by every empty XREAD until the first entry arrived, and an entry
        # added between two of them was never seen (the round then waited for it until its deadline)
        self.cursor = "0-0"
        self.done = threading.Event()
        self.changed = threading.Condition()

    def run(self) -> None:
        from tasks.state.streams import read_new

        while not self.done.is_set():
            for entry_id, fields in read_new(self.client, self.stream, self.cursor, count=1000, block_ms=200):
                self.cursor = entry_id
                now = time.perf_counter()
                rid = fields["request_id"]
                if fields.get("terminal") == "1" or rid not in self.seen:
                    self.seen.setdefault(rid, now)
                    self.status[rid] = fields["status"]
            with self.changed:
                self.changed.notify_all()

    def stop(self, timeout: float = 5.0) -> None:
        """End the reads and wait for the last one: a round stops its reader before its server
        can go away under a blocking read."""
        self.done.set()
        self.join(timeout)


def batches_logged(logs: Path, since: float) -> list[tuple[float, dict[str, Any]]]:
    """The workers' ``batch_finished`` lines after ``since``: (wall-clock seconds, fields)."""
    found = []
    for path in sorted(logs.glob("w*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if '"batch_finished"' not in line:
                continue
            try:
                fields = json.loads(line[line.index("{"):])
                stamp = datetime.fromisoformat(str(fields["timestamp"]).replace("Z", "+00:00")).timestamp()
            except (ValueError, KeyError):
                continue
            if stamp >= since:
                found.append((stamp, {**fields, "log": path.stem}))
    return sorted(found, key=lambda item: item[0])


def batch_steps(logs: Path, since: float, submit_ms: list[float]) -> dict[str, tuple[float, float]]:
    """p50 and p99 (ms) of each step of the batches the workers logged after ``since``
    (``batch_finished``'s timings: :data:`tasks.decision.batch.STEPS`), after the control
    plane's own ``submit_many`` calls (``submit_ms``)."""
    from tasks.decision.batch import STEPS

    logged = [fields for _, fields in batches_logged(logs, since)]
    columns = {"submit_many": submit_ms}
    columns.update({step: [float(f[f"{step}_ms"]) for f in logged if f"{step}_ms" in f] for step in STEPS})
    return {name: (percentile(values, 50), percentile(values, 99))
            for name, values in columns.items() if values}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def run_round(
    url: str,
    processes: int,
    args: argparse.Namespace,
    snapshot: dict[str, Any],
    server_pid: int | None = None,
    offering: bool = False,
) -> dict[str, Any]:
    """One measurement with ``processes`` worker processes on a fresh database.

    Throughput: ``--inflight`` outstanding requests per process (saturates the
    workers). Latency: one request outstanding at a time (no queueing), which
    is what a request sees on an idle-to-moderately loaded deployment. With
    ``offering``, the round is the open loop at ``--rate`` instead (after the same warm-up).
    """
    from tasks.base.settings import Settings, reset_settings
    from tasks.edges.client import ServiceClient
    from tasks.edges.localrun import WorkerProcess
    from tasks.state.context import redis_client

    os.environ["GPUSCHED_REDIS_URL"] = url
    reset_settings()
    settings = Settings(redis_url=url)
    redis_client(settings).flushdb()
    client = ServiceClient(settings)
    client.apply_cluster(snapshot)
    logs = Path(tempfile.mkdtemp(prefix="gpusched-bench-"))
    env = {"GPUSCHED_REDIS_URL": url,
           # INFO with --steps: each batch's batch_finished line and its step timings
           "GPUSCHED_LOG_LEVEL": "INFO" if offering and args.steps else "WARNING",
           "GPUSCHED_DECIDE_LOCK": str(not args.optimistic).lower(),
           "GPUSCHED_DECIDER_STANDBY": str(args.standby).lower()}
    batch = getattr(args, "batch", 0)
    if batch:
        env["GPUSCHED_DECIDE_BATCH_SIZE"] = str(batch)
    workers = [WorkerProcess(env, f"bench{i}", logs / f"w{i}.log", pool=args.pool).start()
               for i in range(processes)]
    reader: ResultReader | None = None
    try:
        for worker in workers:
            worker.wait_ready(60)
        reader = ResultReader(redis_client(settings, blocking=True), client.rt.keys.results)
        reader.start()
        time.sleep(0.3)
        mix = MIXES[args.mix]
        inflight = (args.batch_inflight * batch if batch else args.inflight) * processes
        # Every worker process decides each request shape before the clock starts (a long-lived
        # worker's memo is warm): in a batch round, at least 8 batches per process.
        warmup = max(args.warmup, 8 * batch * processes)
        _drive(client, reader, plan(warmup, mix, f"warm{processes}"), inflight, batch)
        if offering:  # the open loop alone, on the cluster the closed loop starts from
            if args.rate_warmup:  # the same load, unmeasured: a process's first full collections
                settling = plan(round(args.rate * args.rate_warmup), mix, f"settle{processes}")
                _offer(client, reader, settling, batch, args.rate)
            offering_plan = plan(args.rate_requests, mix, f"rate{processes}")
            since = time.time()
            offered = _offer(client, reader, offering_plan, batch, args.rate)
            # the workers' logs stay for the caller (--steps reads the lines logged since)
            return {"processes": processes, "batch": batch, "offered": offered, "logs": logs, "since": since}
        measured = plan(args.requests, mix, f"run{processes}")
        pids = _process_pids(server_pid, workers) if args.cpu_split else {}
        cpu_before = _cpu_ticks(pids)
        started = time.perf_counter()
        loaded = _drive(client, reader, measured, inflight, batch)
        wall = time.perf_counter() - started
        cpu_after = _cpu_ticks(pids)
        idle = _drive(client, reader, plan(args.latency_requests, mix, f"lat{processes}"), 1)
        core = _core_ms(client, {r["request_id"] for r in measured})
    finally:
        if reader is not None:
            reader.stop()
        for worker in workers:
            worker.stop()
        client.close()
    shutil.rmtree(logs, ignore_errors=True)  # kept only when the round failed
    statuses = {s: list(reader.status.get(r["request_id"]) for r in measured).count(s)
                for s in ("scheduled", "unschedulable", "rejected")}
    return {
        "processes": processes, "batch": batch, "requests": len(measured), "wall_s": wall,
        "decisions_per_s": len(loaded) / wall,
        "loaded_p50_ms": percentile(loaded, 50), "loaded_p99_ms": percentile(loaded, 99),
        "p50_ms": percentile(idle, 50), "p99_ms": percentile(idle, 99),
        "core_p50_ms": percentile(core, 50) if core else 0.0, "statuses": statuses,
        "cpu_ms": _cpu_split(pids, cpu_before, cpu_after, len(measured)),
    }


def _process_pids(server_pid: int | None, workers: list[Any]) -> dict[str, list[int]]:
    """The processes whose CPU ``--cpu-split`` reports, by role."""
    roles: dict[str, list[int]] = {"driver": [os.getpid()], "redis": [], "consumers": [], "pool": []}
    if server_pid is not None:
        roles["redis"].append(server_pid)
    for worker in workers:
        roles["consumers"].append(worker.pid)
        roles["pool"].extend(worker.pool_pids())
    return roles


def _cpu_ticks(pids: dict[str, list[int]]) -> dict[int, int]:
    """User + system clock ticks of each process (``/proc/<pid>/stat``), skipping unreadable ones."""
    ticks = {}
    for pid in (pid for group in pids.values() for pid in group):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks[pid] = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return ticks


def _cpu_split(
    pids: dict[str, list[int]], before: dict[int, int], after: dict[int, int], decisions: int
) -> dict[str, float]:
    """CPU milliseconds per decision of each role between the two readings."""
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    return {
        role: sum(after[pid] - before[pid] for pid in group if pid in before and pid in after)
        * tick_ms / max(decisions, 1)
        for role, group in pids.items()
    }


def _drive(
    client: Any, reader: ResultReader, requests: list[dict[str, Any]], inflight: int, batch: int = 0
) -> list[float]:
    """Closed loop: keep ``inflight`` requests outstanding; return latencies (ms).

    ``batch`` > 0: submit ``batch`` requests at a time with ``submit_many()``.
    """
    submitted: dict[str, float] = {}
    pending = list(requests)
    latencies: list[float] = []
    outstanding: set[str] = set()
    deadline = time.monotonic() + 600
    step = max(batch, 1)
    while pending or outstanding:
        while pending and len(outstanding) + min(step, len(pending)) <= max(inflight, step):
            chunk, pending = pending[:step], pending[step:]
            now = time.perf_counter()
            submitted.update((item["request_id"], now) for item in chunk)
            if batch:
                client.submit_many(chunk)
            else:
                client.submit(chunk[0])
            outstanding.update(item["request_id"] for item in chunk)
        with reader.changed:
            reader.changed.wait(0.05)
        for rid in [r for r in outstanding if r in reader.seen]:
            outstanding.discard(rid)
            latencies.append((reader.seen[rid] - submitted[rid]) * 1000)
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(outstanding)} requests never got a result")
    return latencies


def _offer(
    client: Any, reader: ResultReader, requests: list[dict[str, Any]], batch: int, rate: float
) -> dict[str, Any]:
    """Open loop: send ``batch`` requests (one when 0) every ``batch / rate`` s on a fixed
    schedule, then wait for every result; the latencies (ms) and how far sending fell behind."""
    step = max(batch, 1)
    chunks = [requests[start:start + step] for start in range(0, len(requests), step)]
    submitted: dict[str, float] = {}
    submit_ms: list[float] = []  # each submit_many (or submit) call, in the control plane
    started = time.perf_counter()
    behind = 0.0
    for number, chunk in enumerate(chunks):
        due = started + number * step / rate
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        behind = max(behind, -wait)
        now = time.perf_counter()
        submitted.update((item["request_id"], now) for item in chunk)
        if batch:
            client.submit_many(chunk)
        else:
            client.submit(chunk[0])
        submit_ms.append((time.perf_counter() - now) * 1000)
    deadline = time.monotonic() + 600
    while any(rid not in reader.seen for rid in submitted):
        if time.monotonic() > deadline:
            raise RuntimeError("offered requests never got a result")
        with reader.changed:
            reader.changed.wait(0.05)
    wall = max(reader.seen[rid] for rid in submitted) - started
    latency = {rid: (reader.seen[rid] - sent) * 1000 for rid, sent in submitted.items()}
    latencies = list(latency.values())
    slowest = sorted(latency, key=latency.__getitem__)[-max(1, len(latency) // 100):]
    parts = _where_time_went(client, submitted, reader.seen)
    return {"rate": rate, "achieved": len(submitted) / wall, "p50_ms": percentile(latencies, 50),
            "p99_ms": percentile(latencies, 99), "max_ms": max(latencies), "behind_ms": behind * 1000,
            "all": _mean_parts(parts, list(latency)), "slowest": _mean_parts(parts, slowest),
            "submit_ms": submit_ms}


def _where_time_went(
    client: Any, sent: dict[str, float], seen: dict[str, float]
) -> dict[str, tuple[float, float, float]]:
    """Per request (sent and seen: ``perf_counter`` times), ms from sending to the start of the
    decision that answered it, deciding it (its event's ``elapsed_ms``), and from its end (the
    event's time) to the result read: waiting, deciding, then the batch's later decisions, the
    commit and the read. Event times are wall clock, moved onto ``perf_counter`` by the offset
    between the two clocks now."""
    offset = time.time() - time.perf_counter()
    decided: dict[str, tuple[float, float]] = {}  # the last decision of each: (end, elapsed ms)
    for rid, fields, elapsed in _decisions(client, sent):
        stamp = datetime.fromisoformat(fields["time"].replace("Z", "+00:00")).timestamp()
        decided[rid] = (stamp - offset, elapsed)
    return {
        rid: ((end - elapsed / 1000 - sent[rid]) * 1000, elapsed, (seen[rid] - end) * 1000)
        for rid, (end, elapsed) in decided.items()
    }


def _mean_parts(parts: dict[str, tuple[float, float, float]], request_ids: list[str]) -> dict[str, float]:
    """The mean of each of :func:`_where_time_went`'s parts over ``request_ids``."""
    chosen = [parts[rid] for rid in request_ids if rid in parts] or [(0.0, 0.0, 0.0)]
    waiting, deciding, after = (sum(values) / len(chosen) for values in zip(*chosen, strict=True))
    return {"requests": len(request_ids), "waiting": waiting, "deciding": deciding, "after": after}


def _core_ms(client: Any, request_ids: set[str]) -> list[float]:
    return [elapsed for _, _, elapsed in _decisions(client, request_ids)]


def _decisions(client: Any, request_ids: Container[str]) -> Iterator[tuple[str, dict[str, str], float]]:
    """Each ``sched.decision.made`` event of ``request_ids``, in log order: the request id, the
    event's fields and its ``elapsed_ms``."""
    from tasks.state.streams import iter_stream

    for _, fields in iter_stream(client.rt.client, client.rt.keys.events):
        rid = fields.get("request_id")
        if fields.get("type") == "sched.decision.made" and rid in request_ids:
            yield rid, fields, float(json.loads(fields["data"])["elapsed_ms"])


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2, 4], help="processes per round")
    parser.add_argument("--requests", type=int, default=400, help="measured requests per round")
    parser.add_argument("--warmup", type=int, default=40,
                        help="decided before the clock starts (batch rounds: 8 batches a process at least)")
    parser.add_argument("--inflight", type=int, default=2,
                        help="outstanding requests per process in the throughput phase")
    parser.add_argument("--latency-requests", type=int, default=200,
                        help="requests sent one at a time for the latency figures")
    parser.add_argument("--batches", type=int, nargs="*", default=[0],
                        help="batch sizes per round (0: single gpusched.decide messages)")
    parser.add_argument("--batch-inflight", type=int, default=1,
                        help="outstanding batch messages per process in a batch round")
    parser.add_argument("--pool", choices=["prefork", "solo"], default="prefork",
                        help="Celery pool of each worker process (prefork: one pool child)")
    parser.add_argument("--optimistic", action="store_true",
                        help="disable the decide lease (all deciders race, conflicts retry)")
    parser.add_argument("--standby", action="store_true",
                        help="decider_standby on: one process takes decision messages, the others stand by")
    parser.add_argument("--cluster-workers", type=int, default=500)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--instances", type=int, default=0,
                        help="control-plane instances running before the bench starts (one GPU each)")
    parser.add_argument("--mix", choices=sorted(MIXES), default="mixed")
    parser.add_argument("--redis-url", default=None,
                        help="use this Redis (its database is flushed!) instead of a private one")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="also offer requests at this rate (per s, open loop) and report their latency")
    parser.add_argument("--rate-requests", type=int, default=1500, help="requests offered at --rate")
    parser.add_argument("--rate-warmup", type=float, default=0.0,
                        help="seconds of the same open loop, unmeasured, before the measured one")
    parser.add_argument("--steps", action="store_true",
                        help="with --rate: each batch message's steps (submit_many in the control plane, "
                             "then the worker's sync, claim, decide, commit), p50 / p99")
    parser.add_argument("--cpu-split", action="store_true",
                        help="also print each process's CPU ms per decision under load (Linux /proc)")
    args = parser.parse_args(argv)

    from tasks.edges.localrun import start_redis

    server = None if args.redis_url else start_redis()
    url = args.redis_url or (server.url if server else "")
    snapshot = cluster(args.cluster_workers, args.gpus)
    snapshot["model_instances"] = running_instances(args.cluster_workers, args.gpus, args.instances)
    print(f"cluster {args.cluster_workers} workers x {args.gpus} GPUs, {args.instances} instances running, "
          f"mix {args.mix} {MIXES[args.mix]}, {args.requests} requests/round, "
          f"{args.inflight} in flight per process, "
          f"decide lease {'off' if args.optimistic else 'on'}"
          f"{', decider standby on' if args.standby else ''}")
    print(f"{'procs':>5} {'batch':>5} {'decisions/s':>12} {'p50 ms':>8} {'p99 ms':>8} {'loaded p50':>11} "
          f"{'loaded p99':>11} {'core p50':>9}  statuses")
    try:
        for processes, batch in [(p, b) for p in args.workers for b in args.batches]:
            server_pid = server.process.pid if server is not None and server.process is not None else None
            row = run_round(url, processes, argparse.Namespace(**{**vars(args), "batch": batch}), snapshot,
                            server_pid)
            print(f"{row['processes']:>5} {row['batch'] or '-':>5} {row['decisions_per_s']:>12.1f} "
                  f"{row['p50_ms']:>8.1f} "
                  f"{row['p99_ms']:>8.1f} {row['loaded_p50_ms']:>11.1f} {row['loaded_p99_ms']:>11.1f} "
                  f"{row['core_p50_ms']:>9.1f}  {row['statuses']}", flush=True)
            if args.cpu_split:
                split = ", ".join(f"{role} {ms:.2f}" for role, ms in row["cpu_ms"].items())
                print(f"      CPU ms per decision under load: {split} "
                      f"(total {sum(row['cpu_ms'].values()):.2f})", flush=True)
            if args.rate:
                rate_args = argparse.Namespace(**{**vars(args), "batch": batch})
                offering = run_round(url, processes, rate_args, snapshot, server_pid, offering=True)
                got = offering["offered"]
                print(f"      offered {got['rate']:.0f}/s (open loop, a round of its own): completed "
                      f"{got['achieved']:.1f}/s, p50 {got['p50_ms']:.1f} ms, p99 {got['p99_ms']:.1f} ms, "
                      f"max {got['max_ms']:.1f} ms; sending fell behind by up to {got['behind_ms']:.1f} ms",
                      flush=True)
                for label in ("all", "slowest"):
                    part = got[label]
                    print(f"      {'every request' if label == 'all' else 'the slowest 1 %'} "
                          f"({part['requests']}), mean ms: {part['waiting']:.1f} from sending to its "
                          f"decision's start, {part['deciding']:.1f} deciding, {part['after']:.1f} from then "
                          "to its result read (the batch's later decisions, the commit, the read)",
                          flush=True)
                if args.steps:
                    steps = batch_steps(offering["logs"], offering["since"], got["submit_ms"])
                    print("      per batch message, p50 / p99 ms: " + ", ".join(
                        f"{name} {p50:.1f} / {p99:.1f}" for name, (p50, p99) in steps.items()), flush=True)
                shutil.rmtree(offering["logs"], ignore_errors=True)
    finally:
        if server is not None:
            server.remove()
    print("decisions/s: saturated (--inflight per process); p50/p99: submit() -> result entry on "
          "gpusched:results, one request at a time; loaded p50/p99: under the saturating load; "
          "core: the decision itself (snapshot sync + placement core), ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
