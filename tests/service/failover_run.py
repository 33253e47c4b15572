"""A failover under load with real processes, and its figures (the test and ``bench/bench_failover.py``).

One master, one replica, three Sentinels, real worker processes; a submitter
sends requests at a steady pace with cancels and cluster events, two readers
follow ``gpusched:results``:

* the **control plane** reads through a consumer group bounded by the
  acknowledged position (``read_group(..., acknowledged=keys.acked)``), as
  ``docs/service.md`` tells a control plane to — what it is handed is what
  the service acknowledged;
* the **raw reader** reads with plain ``XREAD`` (what a reader that ignores
  the acknowledged position would see): the figures show what it saw that a
  failover took away.

Mid-run the replica is frozen (SIGSTOP) and :data:`BACKLOG_BYTES` are written
to the master, more than the sockets between them hold, so everything written
for the next ``lag_s`` stays in the master's memory; then the master is
SIGKILLed and the replica thawed: the Sentinels promote a replica that really
lacks the master's last writes (the figures count them). Optionally the old master comes back and
the Sentinels make it a replica of the new one; optionally the new master is
killed too, once the old one caught up (a failover back).

Every client call retries on an outage or a missing acknowledgement, as a
control plane would (each call is idempotent); ``submitters`` threads submit
side by side, each with its own client, so writes go on while one waits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from service.support import Deployment, cluster, llm_request, wait_until, worker_row

from tasks.decision.replay import replay
from tasks.edges.client import ServiceClient
from tasks.edges.local_failover import MASTER_NAME, ReplicatedRedis, start_replicated
from tasks.state.context import redis_client
from tasks.state.ledger import overbooked
from tasks.state.outages import TRANSIENT_ERRORS
from tasks.state.streams import ack, ensure_group, read_group, read_new

ROOT = Path(__file__).resolve().parents[2]
#: Short Sentinel timings (Sentinel's defaults are 30 s and 180 s).
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 3000
#: One acknowledgement waits at most this long for the replica (the test's replica_ack_timeout_s).
ACK_TIMEOUT_S = 0.5
#: The control plane's consumer group.
GROUP = "control-plane"
#: Written to a frozen replica's master so that what follows stays in the master's memory: more
#: than the kernel's socket buffers hold (a few MB on localhost), less than Redis's replica
#: output buffer soft limit (64 MB), so the replica is not disconnected for it.
BACKLOG_BYTES = 40 << 20
BACKLOG_KEY = "test:replication-backlog"


@dataclass
class Plan:
    """One run: how much load, when the master dies, what comes back."""

    requests: int = 200
    workers: int = 3
    submitters: int = 4
    rate_per_s: float = 40.0
    cancel_every: int = 9
    event_every: int = 20
    invalid_every: int = 50
    kill_after: float = 0.4
    lag_s: float = 1.5
    comeback: bool = True
    #: With a comeback, the requests from this share on wait until the old master replicates.
    comeback_before: float = 0.7
    fail_back: bool = False
    hosts: int = 30
    gpus_per_host: int = 8
    settle_s: float = 120.0


@dataclass
class Seen:
    """What one reader was handed: entries in order (id, request id, status, terminal, when)."""

    entries: list[tuple[str, str, str, bool, float]] = field(default_factory=list)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, entry_id: str, fields: dict[str, str]) -> None:
        with self.lock:
            self.entries.append((entry_id, fields["request_id"], fields["status"],
                                 fields.get("terminal") == "1", time.time()))
            self.results[entry_id] = json.loads(fields["result"])

    def terminal_by_request(self) -> dict[str, set[str]]:
        """Request id → the distinct entry ids of its terminal results."""
        by_request: dict[str, set[str]] = defaultdict(set)
        with self.lock:
            for entry_id, rid, _, terminal, _ in self.entries:
                if terminal:
                    by_request[rid].add(entry_id)
        return by_request

    def live_placements(self) -> dict[str, int]:
        """Request id → worker id of every placement scheduled and not released since."""
        live: dict[str, int] = {}
        with self.lock:
            first = dict.fromkeys(entry_id for entry_id, *_ in self.entries)  # redeliveries once
            for entry_id in first:
                rid, status = next((r, s) for e, r, s, _, _ in self.entries if e == entry_id)
                result = self.results[entry_id]
                if status == "scheduled":
                    live[rid] = result["candidates"][result["selected"]]["worker_id"]
                elif status == "released":
                    live.pop(rid, None)
        return live


def _retrying(call: Any, *args: Any, deadline_s: float = 90.0) -> Any:
    """``call(*args)``, retried on outages and missing acknowledgements (the call is idempotent).

    An outage is whatever the service itself counts as one (:data:`TRANSIENT_ERRORS`): a queued
    cluster event goes through Celery's producer, which gives up on a master that is changing
    with kombu's ``OperationalError``, not a Redis error."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return call(*args)
        except (redis.RedisError, OSError, *TRANSIENT_ERRORS):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class Readers:
    """The control plane (acknowledged entries, consumer group) and the raw reader, on threads."""

    def __init__(self, d: Deployment) -> None:
        self.acknowledged = Seen()
        self.raw = Seen()
        self._stop = threading.Event()
        self._d = d
        # as docs/service.md tells a control plane: bounded when the deployment waits for replicas
        self._bound = d.keys.acked if d.settings.replicas_required else None
        self._threads = [
            threading.Thread(target=self._group, name="control-plane", daemon=True),
            threading.Thread(target=self._plain, name="raw-reader", daemon=True),
        ]
        client = redis_client(d.settings)
        _retrying(ensure_group, client, d.keys.results, GROUP)
        client.close()
        for thread in self._threads:
            thread.start()

    def _group(self) -> None:
        client = redis_client(self._d.settings, blocking=True, max_block_ms=500)
        while not self._stop.is_set():
            try:
                entries = read_group(client, self._d.keys.results, GROUP, "cp-1", count=200, block_ms=200,
                                     acknowledged=self._bound)
                for entry_id, fields in entries:
                    self.acknowledged.add(entry_id, fields)
                ack(client, self._d.keys.results, GROUP, [entry_id for entry_id, _ in entries])
            except (redis.RedisError, OSError):
                time.sleep(0.05)
        client.close()

    def _plain(self) -> None:
        client = redis_client(self._d.settings, blocking=True, max_block_ms=200)
        cursor = "0-0"
        while not self._stop.is_set():
            try:
                for entry_id, fields in read_new(client, self._d.keys.results, cursor, count=200,
                                                 block_ms=200):
                    cursor = entry_id
                    self.raw.add(entry_id, fields)
            except (redis.RedisError, OSError):
                time.sleep(0.05)
        client.close()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)


@dataclass
class Run:
    """A deployment on a replicated Redis, with its readers and what happened."""

    plan: Plan
    d: Deployment
    redis: ReplicatedRedis
    readers: Readers
    accepted: dict[str, str] = field(default_factory=dict)  # request id → status acknowledged
    cancelled: list[str] = field(default_factory=list)
    events_sent: int = 0
    kills: list[float] = field(default_factory=list)
    submitted: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Set once the old master replicates again (or at once without a comeback).
    back: threading.Event = field(default_factory=threading.Event)
    taken_away: Counter[str] = field(default_factory=Counter)

    # ------------------------------------------------------------------ load
    def request(self, n: int) -> dict[str, Any]:
        if self.plan.invalid_every and n % self.plan.invalid_every == self.plan.invalid_every - 1:
            return {"request_id": f"bad-{n:04d}", "model": {"name": "x", "replicas": -1}}
        return llm_request(f"r-{n:04d}", tp=2 if n % 7 == 3 else 1)

    def submit(self, client: ServiceClient, n: int) -> None:
        request = self.request(n)
        submission = _retrying(client.submit, request)
        with self.lock:
            self.accepted[str(request["request_id"])] = submission.status
            self.submitted += 1

    def cancel_one(self, client: ServiceClient, n: int) -> None:
        rid = f"r-{n:04d}"
        if rid in self.accepted:
            _retrying(client.cancel, rid)
            with self.lock:
                self.cancelled.append(rid)

    def cluster_event(self, client: ServiceClient, n: int) -> None:
        """Alternately add a worker and delete a placement the control plane saw."""
        if (n // self.plan.event_every) % 2:
            event: dict[str, Any] = {"kind": "worker_added",
                                     "worker": worker_row(1000 + n, self.plan.gpus_per_host)}
        else:
            live = sorted(self.readers.acknowledged.live_placements())
            if not live:
                return
            event = {"kind": "instance_deleted", "request_id": live[0]}
        _retrying(client.cluster_event, event)
        with self.lock:
            self.events_sent += 1

    def at(self, share: float, timeout: float = 120.0) -> None:
        """Wait until ``share`` of the requests were submitted."""
        wait_until(lambda: self.submitted >= int(self.plan.requests * share), timeout,
                   f"{share:.0%} of the requests submitted", interval=0.02)

    def load(self, lane: int) -> None:
        """Submit every ``submitters``-th request from ``lane`` on, at ``rate_per_s / submitters``, with
        its own client; cancel some of its requests and send some cluster events on the way."""
        plan = self.plan
        client = ServiceClient(self.d.settings)
        period = plan.submitters / plan.rate_per_s
        try:
            for n in range(lane, plan.requests, plan.submitters):
                if n >= plan.requests * plan.comeback_before:
                    self.back.wait(plan.settle_s)  # the rest is submitted with the old master back
                began = time.monotonic()
                self.submit(client, n)
                if plan.cancel_every and n % plan.cancel_every == 2:
                    self.cancel_one(client, n)
                if plan.event_every and n % plan.event_every == plan.event_every - 1:
                    self.cluster_event(client, n)
                time.sleep(max(0.0, period - (time.monotonic() - began)))
        finally:
            client.close()

    # ------------------------------------------------------------- failover
    def kill_master(self, *, lag_s: float) -> None:
        """Freeze the replicas for ``lag_s`` behind a backlog (writes they will never get), then
        SIGKILL the master and thaw them."""
        frozen = freeze_replicas(self.redis) if lag_s else []
        time.sleep(lag_s)
        done = fail_over(self.redis, self.d.keys, frozen)
        self.kills.append(done.killed_at)
        self.taken_away.update(done.taken_away)

    def settle(self) -> None:
        expected = {rid for rid, status in self.accepted.items() if status != "conflict"}

        def settled() -> bool:
            finished = set(self.readers.acknowledged.terminal_by_request())
            return expected <= finished and _retrying(self.d.idle)

        try:
            wait_until(settled, self.plan.settle_s, "every acknowledged request to get its terminal result",
                       interval=0.5)
        except AssertionError as error:  # say what is missing: the requests, and what the service holds
            missing = sorted(expected - set(self.readers.acknowledged.terminal_by_request()))
            raise AssertionError(f"{error}: {len(missing)} without one ({missing[:10]}); "
                                 f"pending: {_retrying(self.d.pending)}") from None
        time.sleep(1.0)  # anything late would show now


def _tails(client: redis.Redis, keys: Any) -> dict[str, set[str]]:
    """Every entry id of the results and events streams on one server."""
    return {stream: {str(entry_id) for entry_id, _ in client.xrange(stream)}
            for stream in (keys.results, keys.events)}


def sentinel_settings(replicated: ReplicatedRedis) -> dict[str, Any]:
    """The settings of a deployment that finds its master through ``replicated``'s Sentinels."""
    return {"redis_url": replicated.url(), "redis_sentinels": replicated.sentinel_list,
            "redis_sentinel_master": MASTER_NAME, "replica_ack_timeout_s": ACK_TIMEOUT_S}


def start_sentinels(directory: Path) -> ReplicatedRedis:
    """A master, a replica and three Sentinels with the short timings of these tests."""
    return start_replicated(directory, down_after_ms=DOWN_AFTER_MS, failover_timeout_ms=FAILOVER_TIMEOUT_MS)


def stop_sentinels(replicated: ReplicatedRedis) -> None:
    """Stop every Sentinel and server, frozen ones too."""
    for index in range(len(replicated.servers)):
        replicated.thaw(index)  # a failure while frozen must not leave a stopped process behind
    replicated.stop()


def freeze_replicas(replicated: ReplicatedRedis) -> list[int]:
    """Freeze (SIGSTOP) every replica behind :data:`BACKLOG_BYTES` written to the master: from now
    on the master's writes stay in its memory, and a failover takes them away. The frozen indexes."""
    frozen = replicated.replicas()
    for index in frozen:
        replicated.freeze(index)
    replicated.client(replicated.master_index).set(BACKLOG_KEY, "x" * BACKLOG_BYTES)
    return frozen


@dataclass(frozen=True)
class Failover:
    """One SIGKILL of the master: when (epoch seconds), and the stream entries it took away."""

    killed_at: float
    taken_away: Counter[str]


def fail_over(replicated: ReplicatedRedis, keys: Any, frozen: list[int], timeout: float = 60.0) -> Failover:
    """SIGKILL the master, thaw the ``frozen`` replicas, wait until the Sentinels agree on a new
    master; counts the results and events entries the old master had and the new one lacks."""
    old = replicated.master_index
    before = _tails(replicated.client(old), keys)
    replicated.kill_master()
    killed_at = time.time()
    for index in frozen:
        replicated.thaw(index)
    replicated.wait_for_master(timeout, other_than=old)
    after = _tails(replicated.client(replicated.master_index), keys)
    return Failover(killed_at, Counter({stream: len(ids - after[stream]) for stream, ids in before.items()}))


def start_run(plan: Plan, directory: Path, **overrides: Any) -> Run:
    """Start the replicated Redis, the deployment (workers ready) and the readers; apply the cluster."""
    replicated = start_sentinels(directory / "redis")
    settings = {**sentinel_settings(replicated), **overrides}
    try:
        d = Deployment(settings.pop("redis_url"), directory, settings)
    except BaseException:
        replicated.stop()
        raise
    try:
        d.start_workers(plan.workers)
        _retrying(d.client.apply_cluster, cluster(plan.hosts, plan.gpus_per_host))
        readers = Readers(d)
    except BaseException:
        d.stop()
        replicated.stop()
        raise
    return Run(plan, d, replicated, readers)


def execute(run: Run) -> None:
    """The load (on a thread of its own, never paused), the kill(s) and the comeback, then wait until
    everything settled."""
    plan = run.plan
    loaders = [threading.Thread(target=run.load, args=(lane,), name=f"submitter-{lane}", daemon=True)
               for lane in range(plan.submitters)]
    for loader in loaders:
        loader.start()
    if not plan.comeback:
        run.back.set()
    run.at(plan.kill_after)
    run.kill_master(lag_s=plan.lag_s)
    if plan.comeback:
        old = run.redis.killed[-1]
        run.at((plan.kill_after + plan.comeback_before) / 2)
        run.redis.restart(old)
        run.redis.wait_replicating(old, 60)
        run.back.set()
        if plan.fail_back:
            run.at((plan.comeback_before + 1) / 2)
            run.kill_master(lag_s=0)
    for loader in loaders:
        loader.join(plan.settle_s)
        assert not loader.is_alive(), f"{loader.name} did not finish"
    run.settle()


def figures(run: Run) -> dict[str, Any]:
    """What the run shows (see the module docstring); every count is over acknowledged requests."""
    d = run.d
    seen = run.readers.acknowledged
    terminal = seen.terminal_by_request()
    expected = {rid for rid, status in run.accepted.items() if status != "conflict"}
    stream_terminal: Counter[str] = Counter(
        fields["request_id"] for fields in d.results() if fields["terminal"] == "1"
    )
    capacity, booked = d.client.rt.cluster.ledger()
    metas = d.client.rt.cluster.instance_meta().values()
    ledger = {meta.request_id: meta.workers[0] for meta in metas if meta.source == "gpusched"}
    report = replay(d.redis, d.client.rt.cluster)
    final_ids = {str(entry_id) for entry_id, _ in d.redis.xrange(d.keys.results)}
    raw_lost = {entry_id for entry_id, *_ in run.readers.raw.entries if entry_id not in final_ids}
    raw_terminal = run.readers.raw.terminal_by_request()
    return {
        "accepted": len(expected),
        "terminal_exactly_once": sum(1 for rid in expected if len(terminal.get(rid, ())) == 1),
        "lost": sorted(rid for rid in expected if not terminal.get(rid)),
        "duplicated": sorted(rid for rid, ids in terminal.items() if len(ids) > 1),
        "duplicated_on_stream": sorted(rid for rid, count in stream_terminal.items() if count > 1),
        "handed_out_then_gone": sorted(e for e, *_ in seen.entries if e not in final_ids),
        "overbooked": len(overbooked(capacity, booked)),
        "ledger_equals_live_placements": ledger == seen.live_placements(),
        "booking_violations": _violations(d),
        "replayed": report.replayed,
        "replay_identical": report.identical == report.replayed and not report.differ and not report.skipped,
        "data_lost_marker": bool(d.redis.exists(d.keys.data_lost)),
        "data_loss_logged": sum(_logged(w.log_path, '"event": "data_lost"') for w in d.workers),
        "deciding_refused_logged": sum(_logged(w.log_path, '"event": "deciding_refused"') for w in d.workers),
        "results_again_s": [round(_first_after(seen, kill) - kill, 2) for kill in run.kills],
        "taken_away_entries": dict(run.taken_away),
        "raw_reader_saw_then_gone": len(raw_lost),
        "raw_reader_duplicated": sum(1 for ids in raw_terminal.values() if len(ids) > 1),
        "cancels": len(run.cancelled),
        "cluster_events": run.events_sent,
    }


def _violations(d: Deployment) -> list[str]:
    from tasks.testing import booking_violations
    return booking_violations(d.client.rt)


def _logged(path: Path, needle: str) -> int:
    return sum(1 for line in path.read_text(errors="replace").splitlines() if needle in line)


def _first_after(seen: Seen, moment: float) -> float:
    """When the first entry written after ``moment`` was handed out (inf: never)."""
    with seen.lock:
        handed = [when for entry_id, _, _, _, when in seen.entries
                  if int(entry_id.partition("-")[0]) / 1000 > moment]
    return min(handed, default=float("inf"))


def cli(run: Run, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``gpusched ARGS`` in a process of its own, configured like the workers (through Sentinel)."""
    env = {**os.environ, **run.d.env}
    return subprocess.run([sys.executable, "-m", "tasks.edges.cli", *args], env=env, input=stdin,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def cli_together(
    run: Run, commands: dict[str, tuple[str, ...]]
) -> dict[str, subprocess.CompletedProcess[str]]:
    """Several ``gpusched`` commands at once (each in its own process); their outcomes by name."""
    with ThreadPoolExecutor(len(commands)) as pool:
        futures = {name: pool.submit(cli, run, *args) for name, args in commands.items()}
        return {name: future.result() for name, future in futures.items()}


def stop_run(run: Run) -> None:
    run.readers.stop()
    run.d.stop()
    stop_sentinels(run.redis)
