"""Replay speed: a log of ``--decisions`` decisions at 2,000 × 8, replayed by ``gpusched replay``'s code.

A private ``redis-server`` and ``--workers`` real ``celery -A tasks.app worker``
processes; the ``bench_service`` cluster (``--cluster-workers`` × 8 H100s with
``--instances`` control-plane instances). The log is written by the service
itself: requests (``bench_service.plan``'s mix) are submitted with
``submit_many`` in rounds of ``--round`` requests, and each round's placements
are cancelled once published, so the cluster stays at its size while the log
grows (every decision, booking and release is in it). Then
:func:`tasks.decision.replay.replay` re-runs every decision from the log (folding
the cluster's changes in version order) and the bench prints decisions per
second of the replay, and whether every replayed digest is identical.

    .venv/bin/python bench/bench_replay.py                      # 100,000 decisions
    .venv/bin/python bench/bench_replay.py --decisions 20000
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_service import MIXES, cluster, plan, running_instances  # noqa: E402


def _write_log(client: Any, total: int, size: int) -> float:
    """Decide ``total`` requests in rounds of ``size``, releasing each round; returns decisions/s."""
    started = time.perf_counter()
    for start in range(0, total, size):
        requests = plan(min(size, total - start), MIXES["mixed"], f"r{start:07d}")
        for first in range(0, len(requests), 50):
            client.submit_many(requests[first:first + 50])
        for request in requests:
            client.wait(request["request_id"], timeout=600)
        for request in requests:
            client.cancel(request["request_id"])
        done = start + len(requests)
        print(f"  logged {done} decisions ({done / (time.perf_counter() - started):.0f}/s)", flush=True)
    return total / (time.perf_counter() - started)


def run(args: argparse.Namespace, url: str) -> None:
    """Write the log, then replay it and print the figures."""
    from tasks.base.settings import Settings, reset_settings
    from tasks.decision.replay import replay
    from tasks.edges.client import ServiceClient
    from tasks.edges.localrun import WorkerProcess
    from tasks.state.context import redis_client

    os.environ["GPUSCHED_REDIS_URL"] = url
    reset_settings()
    settings = Settings(redis_url=url, audit_checkpoint_every=0)
    redis_client(settings).flushdb()
    client = ServiceClient(settings)
    snapshot = cluster(args.cluster_workers, 8)
    snapshot["model_instances"] = running_instances(args.cluster_workers, 8, args.instances)
    client.apply_cluster(snapshot)
    logs = Path(tempfile.mkdtemp(prefix="gpusched-replay-"))
    env = {"GPUSCHED_REDIS_URL": url, "GPUSCHED_LOG_LEVEL": "WARNING", "GPUSCHED_AUDIT_CHECKPOINT_EVERY": "0"}
    workers = [WorkerProcess(env, f"replay{i}", logs / f"w{i}.log").start() for i in range(args.workers)]
    try:
        for worker in workers:
            worker.wait_ready(60)
        written = _write_log(client, args.decisions, args.round)
    finally:
        for worker in workers:
            worker.stop()
    shutil.rmtree(logs, ignore_errors=True)
    events = client.rt.client.xlen(client.rt.keys.events)
    started = time.perf_counter()
    report = replay(client.rt.client, client.rt.cluster)
    elapsed = time.perf_counter() - started
    cold = _replay_cold(client, args.cold) if args.cold else None
    client.close()
    print(f"log: {args.decisions} decisions, {events} events (written at {written:.0f} decisions/s by "
          f"{args.workers} workers, with a cancel per placement)")
    print(f"replay: {report.summary()} in {elapsed:.1f} s: {report.replayed / elapsed:.0f} decisions/s "
          f"(reading the log and folding {args.decisions} bookings and releases included)", flush=True)
    if cold is not None:
        print(f"replay as before (no memo: each decision cold), the first {cold[0]} decisions: "
              f"{cold[0] / cold[1]:.1f} decisions/s", flush=True)


def _replay_cold(client: Any, count: int) -> tuple[int, float]:
    """Replay the log's first ``count`` decisions without a memo, as replay did before; (n, seconds)."""
    from tasks.decision import replay as replay_module

    decisions = [entry_id for entry_id, fields in client.rt.client.xrange(client.rt.keys.events)
                 if fields.get("type") == "sched.decision.made"][:count]
    kept = replay_module.SnapshotMemo
    replay_module.SnapshotMemo = lambda: None  # type: ignore[assignment,misc,return-value]
    try:
        started = time.perf_counter()
        report = replay_module.replay(client.rt.client, client.rt.cluster, until=decisions[-1])
        return report.replayed, time.perf_counter() - started
    finally:
        replay_module.SnapshotMemo = kept  # type: ignore[misc]


def main(argv: list[str] | None = None) -> int:
    """Parse the options, start a private Redis, run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=100_000)
    parser.add_argument("--round", type=int, default=2000, help="requests placed, then released, per round")
    parser.add_argument("--cluster-workers", type=int, default=2000)
    parser.add_argument("--instances", type=int, default=4000)
    parser.add_argument("--workers", type=int, default=2, help="worker processes writing the log")
    parser.add_argument("--cold", type=int, default=200,
                        help="also replay the first N decisions without a memo, as before (0: not)")
    args = parser.parse_args(argv)

    from tasks.edges.localrun import start_redis

    server = start_redis()
    try:
        run(args, server.url)
    finally:
        server.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main())
