"""Fuzz every door of gpusched with hostile requests and print what survived (issue 17, item 1).

The same seeded generator as the tests (``tests/fuzzing.py``: keys and values
from the whole Unicode range, lone surrogates included, wrong types, nesting
past the 64-level limit) feeds three doors:

1. ``scheduler_core.schedule()`` in process;
2. the ``gpusched schedule -`` CLI: every case through the CLI's ``main`` in this
   process with strict UTF-8 byte streams, and ``--cli-processes`` of them as
   real ``python -m tasks.edges.cli`` processes;
3. the service's raw queue door: every case as a raw ``gpusched.decide``
   message (``LPUSH`` on ``gpusched.requests``) to ``--workers`` real
   ``celery -A tasks.app worker`` processes on a private ``redis-server``.

Printed per door: cases, outcomes, escaped exceptions, unserialisable results,
rejections without an encodable field, worker deaths, seconds. A door
survived when every problem count is 0.

    .venv/bin/python bench/fuzz_doors.py                       # 20,000 cases
    .venv/bin/python bench/fuzz_doors.py --cases 2000 --seed 7
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "tests"))

from fuzzing import (  # noqa: E402  (after the path set-up)
    base_request,
    cases,
    cli_problems,
    request_file_text,
    result_problems,
    run_cli_in_process,
)

from scheduler_core import schedule  # noqa: E402


def _line(
    door: str, count: int, seconds: float, outcomes: collections.Counter[str], problems: list[str]
) -> None:
    shown = ", ".join(f"{name} {n}" for name, n in sorted(outcomes.items()))
    print(f"{door:<28} {count:>6} cases  {seconds:7.1f} s  problems {len(problems):>3}  ({shown})")
    for problem in problems[:10]:
        print(f"    {problem[:300]}")


def schedule_door(requests: list[dict]) -> None:
    started = time.perf_counter()
    outcomes: collections.Counter[str] = collections.Counter()
    problems: list[str] = []
    for number, request in enumerate(requests):
        try:
            result = schedule(request)
            text = result.model_dump_json()
        except Exception as error:
            problems.append(f"case {number}: escaped {type(error).__name__}: {error!r}")
            continue
        outcomes[result.status] += 1
        problems.extend(f"case {number}: {p}" for p in result_problems(text))
    _line("schedule()", len(requests), time.perf_counter() - started, outcomes, problems)


def cli_door(requests: list[dict], processes: int) -> None:
    started = time.perf_counter()
    outcomes: collections.Counter[str] = collections.Counter()
    problems: list[str] = []
    for number, request in enumerate(requests):
        code, out, err = run_cli_in_process(["schedule", "-"], request_file_text(request))
        outcomes[f"exit {code}"] += 1
        problems.extend(f"case {number}: {p}" for p in cli_problems(code, out, err))
    _line("gpusched schedule (main)", len(requests), time.perf_counter() - started, outcomes, problems)
    started = time.perf_counter()
    outcomes, problems = collections.Counter(), []
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")}
    for number, request in enumerate(requests[:processes]):
        done = subprocess.run([sys.executable, "-m", "tasks.edges.cli", "schedule", "-"], cwd=ROOT, env=env,
                              input=request_file_text(request).encode(), capture_output=True, timeout=120,
                              check=False)
        outcomes[f"exit {done.returncode}"] += 1
        found = cli_problems(done.returncode, done.stdout, done.stderr)
        problems.extend(f"case {number}: {p}" for p in found)
    _line("gpusched schedule (process)", min(processes, len(requests)), time.perf_counter() - started,
          outcomes, problems)


def raw_door(requests: list[dict], workers: int, timeout: float) -> None:
    from service.fuzz_door import through_raw_door
    from service.support import Deployment

    from tasks.edges.localrun import start_redis

    folder = Path(tempfile.mkdtemp(prefix="gpusched-fuzz-"))
    server = start_redis(directory=folder / "redis")
    deployment = Deployment(server.url, folder, {"log_level": "WARNING"})
    try:
        deployment.redis.flushdb()
        deployment.client.apply_cluster({"workers": base_request("-", cluster=True)["workers"],
                                         "model_instances": []})
        deployment.start_workers(workers)
        report = through_raw_door(deployment, requests, timeout)
    finally:
        deployment.stop()
        server.stop()
    outcomes = collections.Counter({**report.statuses, "dead letters": report.dead_letters})
    _line(f"raw gpusched.decide ({workers} w)", report.messages, report.seconds, outcomes, report.problems)
    print(f"    dead-letter reasons: {json.dumps(report.reasons, sort_keys=True)}; logs in {folder}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cli-processes", type=int, default=200, help="cases run as real CLI processes")
    parser.add_argument("--workers", type=int, default=2, help="worker processes behind the raw door")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds the raw door may take")
    args = parser.parse_args()
    with_cluster = list(cases(args.seed, args.cases))
    print(f"{args.cases} fuzzed requests, seed {args.seed} (shared machine: seconds are indicative)")
    schedule_door(with_cluster)
    cli_door(with_cluster, args.cli_processes)
    raw_door(list(cases(args.seed, args.cases, cluster=False)), args.workers, args.timeout)


if __name__ == "__main__":
    main()
