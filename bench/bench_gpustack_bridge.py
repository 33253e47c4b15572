"""The GPUStack bridge: instance created in GPUStack → gpusched's placement written, and the
bridge's own memory and CPU.

Starts GPUStack's own server (2.2.3 from ``.gpustack-venv``, ``tools/gpustack-server/setup.sh``)
with the gpusched plugin on a private PostgreSQL, a private ``redis-server``, one gpusched
worker process, ``--workers`` synthetic GPUStack workers (4 × H100 each) and the bridge
(``gpusched gpustack --mode place``) as a real process. Then, on its own watch of
``/v2/model-instances``, it times every instance from its CREATED event to the UPDATED event
that carries gpusched's worker:

* one at a time: ``--single`` models of one replica, each created once the last is placed;
* a burst: one model of ``--burst`` replicas (GPUStack creates them in one go).

Prints p50/p90/p99 per phase, the bridge's resident memory at the end and its CPU seconds per
placement. GPUStack takes 25-65 s to start; the whole run about two minutes.

    .venv/bin/python bench/bench_gpustack_bridge.py
    .venv/bin/python bench/bench_gpustack_bridge.py --workers 20 --single 30 --burst 40
    .venv/bin/python bench/bench_gpustack_bridge.py --stock     # GPUStack's own scheduler, same workload
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from service.support import Deployment  # noqa: E402

from tasks.edges.gpustack_bridge.api import GpustackApi  # noqa: E402
from tasks.edges.localrun import start_redis  # noqa: E402
from tests.gpustack_bridge.scenario import World  # noqa: E402
from tests.gpustack_bridge.server import GpustackServer, Postgres, prerequisites  # noqa: E402
from tests.gpustack_bridge.synthetic import H100_SPEC  # noqa: E402


class Clock:
    """Times each instance from its creation to its first placement, on a watch of our own."""

    def __init__(self, api: GpustackApi) -> None:
        self.created: dict[int, float] = {}
        self.placed: dict[int, float] = {}
        self.stop = threading.Event()
        self.api = api
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        for event in self.api.watch("model-instances", self.stop):
            now, row = time.monotonic(), event.row
            ident = row.get("id")
            if not isinstance(ident, int):
                continue
            if event.type == 1 and row.get("worker_id") is None:
                self.created.setdefault(ident, now)
            if row.get("worker_id") is not None and ident in self.created:
                self.placed.setdefault(ident, now)

    def wait(self, count: int, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while len(self.placed) < count:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {len(self.placed)} of {count} instances placed in {timeout:g} s")
            time.sleep(0.05)

    def latencies(self, ids: list[int]) -> list[float]:
        return [(self.placed[i] - self.created[i]) * 1000 for i in ids if i in self.placed]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _proc(pid: int) -> tuple[float, int]:
    """CPU seconds (user + system) and resident KiB of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    rss = next(
        int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmRSS:")
    )
    return cpu, rss


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--workers", type=int, default=20)
    parser.add_argument("--single", type=int, default=20, help="one-replica models, one at a time")
    parser.add_argument("--burst", type=int, default=30, help="replicas of the burst model")
    parser.add_argument(
        "--stock",
        action="store_true",
        help="the same workload placed by GPUStack's own scheduler (no bridge), for comparison",
    )
    args = parser.parse_args()
    missing = prerequisites()
    if missing:
        print(f"bench_gpustack_bridge: {missing}", file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="gpusched-bench-gs-"))
    pg = Postgres(Path(tempfile.mkdtemp(prefix="gpusched-bench-pg-"))).start()
    server = GpustackServer(pg.url, scratch / "gpustack", external_scheduler=not args.stock)
    redis_server = start_redis(directory=scratch / "redis")
    world: World | None = None
    try:
        started = time.monotonic()
        server.start()
        print(f"GPUStack healthy after {time.monotonic() - started:.0f} s (shared 2-core machine)")
        models = scratch / "models"
        deployment = Deployment(redis_server.url, scratch, {"model_roots": [str(models)]})
        deployment.start_workers(1)
        world = World(server, deployment, models, scratch, "place")
        world.add_workers(args.workers, [H100_SPEC] * 4)
        assert world.fleet is not None
        world.fleet.start()
        clock = Clock(GpustackApi(server.url, world.api_key))
        world.wait_workers_ready([w.name for w in world.fleet.workers], timeout=120)
        pid = None
        if not args.stock:
            bridge = world.start_bridge()
            assert bridge.process is not None
            pid = bridge.process.pid
        cpu0 = _proc(pid)[0] if pid else 0.0
        for n in range(args.single):
            world.create_model("qwen2.5-0.5b", replicas=1)
            clock.wait(n + 1)
        single = sorted(clock.placed)
        world.create_model("qwen2.5-0.5b", replicas=args.burst)
        clock.wait(args.single + args.burst)
        burst = [i for i in sorted(clock.placed) if i not in single]
        placed = args.single + args.burst
        print(
            "placed by GPUStack's own scheduler (stock server, no bridge)"
            if args.stock
            else "placed by gpusched through the bridge (plugin: GPUStack's scheduler off)"
        )
        for name, ids in (("one at a time", single), (f"burst of {args.burst}", burst)):
            values = clock.latencies(ids)
            p50, p90, p99 = statistics.median(values), _pct(values, 0.9), _pct(values, 0.99)
            print(
                f"{name:>14}: {len(values)} placements, created → written p50 {p50:.0f} ms, "
                f"p90 {p90:.0f} ms, p99 {p99:.0f} ms, max {max(values):.0f} ms"
            )
        if pid:
            cpu1, rss = _proc(pid)
            per = (cpu1 - cpu0) * 1000 / placed
            print(
                f"bridge: {rss / 1024:.0f} MiB resident, {per:.1f} ms CPU per placement "
                f"({cpu1 - cpu0:.2f} s for {placed}; {args.workers} workers x 4 GPUs)"
            )
        clock.stop.set()
        return 0
    finally:
        if world is not None:
            world.stop()
            world.deployment.stop()
        server.stop()
        redis_server.stop()
        pg.stop()
        shutil.rmtree(pg.directory, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
