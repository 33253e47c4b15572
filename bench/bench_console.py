"""The console's cluster map at 2,000 × 8: server-side work per page, the HTTP answer, and the browser.

On a private ``redis-server``: a synthetic cluster (``--workers`` hosts ×
``--gpus`` H100s, ``--instances`` control-plane instances of one GPU each,
spread by a seeded generator) applied through the service's own ``cluster
apply``. Then, ``--repeat`` times each:

* **build**: :func:`tasks.edges.console.data.map_data` (the Redis reads, the
  holders inverted from the claims, the compact JSON-ready dict), in process:
  what a page costs right after the cluster changed;
* **cached**: :class:`tasks.edges.console.data.MapCache` on an unchanged
  cluster (one ``GET`` of the version, the parked queue, the flag);
* **http**: ``GET /api/map`` from a real ``gpusched console`` (uvicorn), gzip
  accepted, to the last byte, on an unchanged cluster and right after a change
  (a ``worker_labels`` event, more than the 0.5 s rebuild spacing apart);
* **requests**: ``GET /requests`` (the requests page, server-rendered);
* **browser** (when Debian's chromium and Playwright are there): the map page
  opened in headless chromium until every worker is drawn.

Prints medians (and min–max). Times move with the machine's load: compare
ratios, and run nothing else meanwhile.

    .venv/bin/python bench/bench_console.py
    .venv/bin/python bench/bench_console.py --workers 200 --repeat 9
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench_service import cluster, running_instances  # noqa: E402

from tasks.edges.localrun import free_port, start_redis  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ms (min {min(values):.1f}, max {max(values):.1f})"


def _timed(work: Any, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1000)
    return times


def _fetch(url: str) -> bytes:
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        return bytes(reply.read())


def _populate(url: str, workers: int, gpus: int, instances: int) -> Any:
    from tasks.base.settings import Settings
    from tasks.edges.client import ServiceClient

    client = ServiceClient(Settings(redis_url=url))
    snapshot = cluster(workers, gpus)
    snapshot["model_instances"] = running_instances(workers, gpus, instances)
    client.apply_cluster(snapshot)
    return client


def _browser_times(url: str, workers: int, repeat: int) -> list[float] | None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not Path(CHROMIUM).exists():
        return None
    times: list[float] = []
    phases: dict[str, list[float]] = {label: [] for label, _, _ in _PHASES}
    with sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context = playwright.chromium.launch_persistent_context(profile, executable_path=CHROMIUM,
                                                                 headless=True, args=FLAGS)
        page = context.new_page()
        for _ in range(repeat):
            started = time.perf_counter()
            page.goto(url, wait_until="domcontentloaded")
            page.wait_for_selector(f'#map[data-rendered="{workers}"]', timeout=120_000, state="attached")
            times.append((time.perf_counter() - started) * 1000)
            marks = {"navigation": 0.0, **page.evaluate(_MARKS)}
            for label, start, end in _PHASES:
                phases[label].append(marks[end] - marks[start])
        context.close()
    for label, values in phases.items():
        print(f"       {label + ':':<46} {_median(values)}")
    return times


#: Where the browser's time goes: (label, from mark, to mark), marks of :data:`_MARKS`.
_PHASES = (
    ("navigation → page received", "navigation", "page"),
    ("→ script asked for /api/map", "page", "requested"),
    ("waiting for a connection", "requested", "sent"),
    ("its answer", "sent", "answered"),
    ("JSON parsed", "answered", "map-data"),
    ("DOM built", "map-data", "map-built"),
    ("styled, laid out, painted", "map-built", "map-drawn"),
)
#: The console's own performance marks (console.js) and the resource timings, in ms since navigation.
_MARKS = """(() => {
  const marks = Object.fromEntries(['map-data', 'map-built', 'map-drawn'].map(
    (n) => [n, performance.getEntriesByName(n).at(-1).startTime]));
  const fetched = performance.getEntriesByType('resource').filter((e) => e.name.endsWith('/api/map')).at(-1);
  const nav = performance.getEntriesByType('navigation')[0];
  return {...marks, requested: fetched.startTime, answered: fetched.responseEnd,
          page: nav.responseEnd, sent: fetched.requestStart};
})()"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workers", type=int, default=2000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--instances", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args(argv)

    server = start_redis()
    console = None
    try:
        os.environ["GPUSCHED_REDIS_URL"] = server.url
        client = _populate(server.url, args.workers, args.gpus, args.instances)
        from tasks.edges.console.data import MapCache, map_data

        data = map_data(client.rt)
        body = json.dumps(data).encode()
        print(f"cluster: {args.workers} workers x {args.gpus} GPUs, {args.instances} instances "
              f"({len(data['holders'])} holders); map JSON {len(body) / 1e6:.2f} MB, "
              f"gzip {len(gzip.compress(body)) / 1e3:.0f} kB")
        build = _timed(lambda: map_data(client.rt), args.repeat)
        print(f"build  map_data (Redis reads + holders + JSON-ready): {_median(build)}")
        dumped = _timed(lambda: json.dumps(map_data(client.rt)), args.repeat)
        print(f"       and json.dumps of it:                          {_median(dumped)}")
        cache = MapCache()
        cache.get(client.rt)
        cached = _timed(lambda: cache.get(client.rt), args.repeat)
        print(f"cached MapCache.get, cluster unchanged:               {_median(cached)}")

        port = free_port()
        env = {**os.environ, "GPUSCHED_LOG_LEVEL": "WARNING"}
        command = [sys.executable, "-m", "tasks.edges.cli", "console", "--port", str(port)]
        console = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                _fetch(base + "/api/replay-status")
                break
            except OSError:
                time.sleep(0.1)
        _fetch(base + "/api/map")  # warm: templates, first connections
        answered = _timed(lambda: _fetch(base + "/api/map"), args.repeat)
        print(f"http   GET /api/map, cluster unchanged (gzip):        {_median(answered)}")
        changed = []
        for n in range(args.repeat):
            labels = {"gpu": "h100", "n": str(n)}
            client.cluster_event({"kind": "worker_labels", "worker_id": 1, "labels": labels}, queue=False)
            time.sleep(0.6)  # past the rebuild spacing: this GET rebuilds
            changed += _timed(lambda: _fetch(base + "/api/map"), 1)
        print(f"http   GET /api/map, right after a change (rebuilt):  {_median(changed)}")
        page = _timed(lambda: _fetch(base + "/requests"), args.repeat)
        print(f"http   GET /requests (server-rendered page):          {_median(page)}")
        if not args.no_browser:
            times = _browser_times(base + "/", args.workers, max(3, args.repeat // 2))
            if times is None:
                print("browser: skipped (no /usr/bin/chromium or no playwright)")
            else:
                print(f"browser map page until every worker is drawn:       {_median(times)}")
        client.close()
    finally:
        if console is not None:
            console.terminate()
            console.wait(10)
        server.remove()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
