"""Replay speed: a log of ``--decisions`` decisions at 2,000 × 8, replayed by ``gpusched replay``'s code.

A private ``redis-server`` and ``--workers`` real ``celery -A tasks.app worker``
processes; the ``bench_service`` cluster (``--cluster-workers`` × 8 H100s with
``--instances`` control-plane instances). The log is written by the service
itself: requests (``bench_service.plan``'s mix) are submitted with
``submit_many`` in batches of ``--batch``, ``--round`` requests per round, and
each round's placements are cancelled once published (one after the other:
cancels sent from four threads at once ran 15-30 times slower), so the
cluster stays at its size while the log grows (every decision, booking and
release is in it). ``--minutes`` stops writing after the
round that ends past that many minutes (the log is as large as the service
wrote in that time: nothing is made up outside it). ``--save DIR`` keeps the
written log (Redis's ``dump.rdb``); ``--log DIR`` replays a kept log instead
of writing one, so the same log can be replayed by several versions of the
code in turn.

Then :func:`tasks.decision.replay.replay` re-runs every decision from the log
(folding the cluster's changes in version order) and the bench prints
decisions per second of the replay (wall and this process's CPU time, its
replay processes included), the load average, and whether every replayed
digest is identical.

    .venv/bin/python bench/bench_replay.py                      # 100,000 decisions
    .venv/bin/python bench/bench_replay.py --minutes 10 --save /tmp/log
    .venv/bin/python bench/bench_replay.py --log /tmp/log --processes 1 2
"""

from __future__ import annotations

import argparse
import os
import resource
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

#: The kept log's file in a ``--save`` / ``--log`` folder (what ``redis-server --dir`` loads).
DUMP = "dump.rdb"


def _load() -> str:
    return "/".join(f"{value:.1f}" for value in os.getloadavg())


def _write_log(client: Any, args: argparse.Namespace) -> tuple[int, float]:
    """Decide up to ``--decisions`` requests in rounds, releasing each round; (decisions, seconds)."""
    started = time.perf_counter()
    limit = started + args.minutes * 60 if args.minutes else None
    done = 0
    while done < args.decisions and (limit is None or time.perf_counter() < limit):
        requests = plan(min(args.round, args.decisions - done), MIXES["mixed"], f"r{done:07d}")
        for first in range(0, len(requests), args.batch):
            client.submit_many(requests[first:first + args.batch])
        for request in requests:
            client.wait(request["request_id"], timeout=600)
        decided = time.perf_counter()
        for request in requests:
            client.cancel(request["request_id"])
        done += len(requests)
        elapsed = time.perf_counter() - started
        print(f"  logged {done} decisions ({done / elapsed:.0f}/s; this round's cancels "
              f"{time.perf_counter() - decided:.1f} s; load {_load()})", flush=True)
    return done, time.perf_counter() - started


def write(args: argparse.Namespace, url: str) -> tuple[int, float]:
    """Apply the cluster, start the workers, write the log; (decisions, seconds)."""
    from tasks.base.settings import Settings, reset_settings
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
        return _write_log(client, args)
    finally:
        for worker in workers:
            worker.stop()
        shutil.rmtree(logs, ignore_errors=True)
        client.close()


def replay_log(url: str, processes: int | None) -> None:
    """Replay the whole log once and print the figures."""
    from tasks.base.settings import Settings
    from tasks.decision.replay import replay
    from tasks.edges.client import ServiceClient

    client = ServiceClient(Settings(redis_url=url))
    events = client.rt.client.xlen(client.rt.keys.events)
    load = _load()
    cpu = _cpu_seconds()
    started = time.perf_counter()
    report = replay(client.rt.client, client.rt.cluster, processes=processes)
    elapsed = time.perf_counter() - started
    cpu = _cpu_seconds() - cpu
    client.close()
    print(f"replay ({processes or 'auto'} processes): {report.summary()}, {len(report.skipped)} skipped, "
          f"{events} events, in {elapsed:.1f} s: {report.replayed / elapsed:.0f} decisions/s "
          f"({report.replayed / cpu:.0f} per CPU second; load {load} before, {_load()} after)", flush=True)


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the replay's processes)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main(argv: list[str] | None = None) -> int:
    """Parse the options, start a private Redis (on a kept log's folder with ``--log``), run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=100_000)
    parser.add_argument("--minutes", type=float, default=0,
                        help="stop writing after the round that ends past this many minutes (0: no limit)")
    parser.add_argument("--round", type=int, default=2000, help="requests placed, then released, per round")
    parser.add_argument("--batch", type=int, default=50, help="requests per submit_many")
    parser.add_argument("--cluster-workers", type=int, default=2000)
    parser.add_argument("--instances", type=int, default=4000)
    parser.add_argument("--workers", type=int, default=2, help="worker processes writing the log")
    parser.add_argument("--save", type=Path, default=None, help="keep the written log in this folder")
    parser.add_argument("--log", type=Path, default=None, help="replay the log kept in this folder")
    parser.add_argument("--processes", type=int, nargs="+", default=[0],
                        help="replay processes, one replay per value (0: replay's own choice)")
    args = parser.parse_args(argv)

    from tasks.edges.localrun import start_redis

    folder = Path(tempfile.mkdtemp(prefix="gpusched-replay-log-"))
    if args.log is not None:
        shutil.copy(args.log / DUMP, folder / DUMP)
    # a kept log is loaded from its dump before the server answers (786 MB for 100,000 decisions)
    server = start_redis(directory=folder, timeout=900 if args.log else 10)
    try:
        if args.log is None:
            print(f"writing: load {_load()}", flush=True)
            decisions, seconds = write(args, server.url)
            print(f"log: {decisions} decisions written in {seconds:.0f} s ({decisions / seconds:.1f} "
                  f"decisions/s by {args.workers} workers, with a cancel per placement; load {_load()})",
                  flush=True)
        for processes in args.processes:
            replay_log(server.url, processes or None)
        if args.log is None and args.save is not None:  # after the replays: they come first
            _save(server.url, args.save)
    finally:
        server.remove()
        shutil.rmtree(folder, ignore_errors=True)
    return 0


def _save(url: str, folder: Path) -> None:
    """Write Redis's dump of the log into ``folder``."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=None)  # a 100,000-decision log takes a while
    client.save()
    directory = Path(str(client.config_get("dir")["dir"]))
    client.close()
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(directory / DUMP, folder / DUMP)
    print(f"log kept in {folder / DUMP}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
