"""The service's decider alone: the placement core on ``bench_service.py``'s cluster and request mix.

What one worker process does per decision, without Redis or Celery: the stored
request parsed, the mirror's workers and instances handed to
``scheduler_core.schedule`` with the chain of ``configs/chain.json`` (16
candidates reported) and one ``SnapshotMemo`` kept across decisions, and the
pick booked (appended to the instances) before the next decision — as
``tasks/decision/core_call.py: run_core`` and the mirror do (the fold's instance tuple
extended by each booking; inside ``deciding()``, the
garbage collector paused, as ``run_core`` decides). The cluster is
``bench_service.py``'s (``--cluster-workers`` × ``--gpus`` H100s, ``--instances``
small instances already running) and so is the mix (10 % tp1, 30 % tp2, 40 %
tp4, 20 % tp8, interleaved). ``--models K`` cycles the requests over K model
ids, so each model's later requests are replicas of a model already running.
``--sizes K`` cycles them over K model weights: K × 4 request shapes (weight and tp
size) in turn, as a control plane serving many models sends them; the table then
also splits the decisions into those on a shape decided before in the run and the
first of each shape (a full pass).

Prints the median, p90, p99 and slowest per tensor-parallel size and over the mix (wall
time of ``schedule()``, ms). ``--check`` also decides each request without
the memo and fails unless both results are byte-identical.

    .venv/bin/python bench/bench_decider.py                       # 2000 × 8, 4000 running
    .venv/bin/python bench/bench_decider.py --mix tp1 --check
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_service import GIB, MIXES, ROOT, cluster, percentile, plan, running_instances

from scheduler_core import ModelInstance, ScheduleRequest, SnapshotMemo, Worker, deciding, extended, schedule
from tasks.decision.booking import candidate_instance
from tasks.intake.chain_config import load_chain

#: Rows of the table besides the tp sizes: decisions on a shape (weight and tp) decided before
#: in the run, and the first decision of each shape (a full pass).
REPEATED, FIRST = "repeated shape", "first of a shape"

def decide_all(args: argparse.Namespace) -> dict[str, list[float]]:
    """Decide ``--warmup`` + ``--requests`` requests in order; the measured times (ms) by tp size."""
    chain = load_chain(ROOT / "configs" / "chain.json").chain
    snapshot = cluster(args.cluster_workers, args.gpus)
    workers = tuple(Worker.model_validate(row) for row in snapshot["workers"])  # a tuple, as the fold
    instances = tuple(
        ModelInstance.model_validate(row)
        for row in running_instances(args.cluster_workers, args.gpus, args.instances)
    )
    memo = SnapshotMemo()
    times: dict[str, list[float]] = {}
    seen: set[tuple[object, ...]] = set()
    requests = plan(args.warmup + args.requests, MIXES[args.mix], "decider")
    for number, raw in enumerate(requests):
        if args.models:  # replicas: a model's later requests place it where it already runs
            raw["model"]["id"] = 1000 + number % args.models
        if args.sizes:  # distinct shapes: K weights (8, 8.5, 9, ... GiB) times the mix's tp sizes
            raw["model"]["weight_bytes"] = int((8 + (number % args.sizes) * 0.5) * GIB)
        shape = (raw["model"]["weight_bytes"], tuple(raw["model"]["backend_parameters"]))
        first = shape not in seen
        seen.add(shape)
        stored = ScheduleRequest.model_validate(raw).model_dump_json()
        request = ScheduleRequest.model_validate_json(stored).model_copy(
            update={"workers": workers, "model_instances": instances}
        )
        with deciding():  # as tasks/decision/core_call.py decides: the collector paused
            started = time.perf_counter()
            result = schedule(request, chain=chain, memo=memo)
            elapsed = (time.perf_counter() - started) * 1000
        if number >= args.warmup:
            times.setdefault(_tp(raw), []).append(elapsed)
            times.setdefault(FIRST if first else REPEATED, []).append(elapsed)
        if args.check and schedule(request, chain=chain).model_dump_json() != result.model_dump_json():
            raise SystemExit(f"request {number}: the decision with the memo differs from the one without")
        if result.selected is not None:  # as the mirror's fold appends a booking
            instances = extended(instances, (_booked(result.candidates[result.selected], number, request),))
    return times


def _tp(raw: dict[str, Any]) -> str:
    params = raw["model"]["backend_parameters"]
    return f"tp{params[1] if params else 1}"


def _booked(chosen: Any, number: int, request: ScheduleRequest) -> ModelInstance:
    model = request.model
    return candidate_instance(
        chosen, id=1_000_000 + number, name=f"booked-{number}", model_id=model.id,
        model_name=model.name, backend=model.backend, state="scheduled",
    )


def main(argv: list[str] | None = None) -> int:
    """Run the decisions and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster-workers", type=int, default=2000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--instances", type=int, default=4000,
                        help="instances running before the first request")
    parser.add_argument("--requests", type=int, default=400, help="measured decisions")
    parser.add_argument("--warmup", type=int, default=40, help="decisions before the measured ones")
    parser.add_argument("--mix", choices=sorted(MIXES), default="mixed")
    parser.add_argument("--models", type=int, default=0,
                        help="requests cycle over this many model ids (replicas; 0: one model per request)")
    parser.add_argument("--sizes", type=int, default=0,
                        help="requests cycle over this many model weights (K sizes x the mix's tp sizes "
                             "distinct shapes; 0: one weight)")
    parser.add_argument("--check", action="store_true",
                        help="also decide without the memo and require byte-identical results")
    args = parser.parse_args(argv)
    times = decide_all(args)
    by_tp = sorted((tp for tp in times if tp.startswith("tp")), key=lambda tp: int(tp[2:]))
    every = [value for tp in by_tp for value in times[tp]]
    print(f"cluster {args.cluster_workers} workers x {args.gpus} GPUs, {args.instances} instances running, "
          f"mix {args.mix}, {len(every)} measured decisions{' (checked)' if args.check else ''}")
    print(f"{'requests':>16} {'decisions':>10} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for name, values in [*((tp, times[tp]) for tp in by_tp), ("all", every),
                         *((row, times[row]) for row in (REPEATED, FIRST) if row in times)]:
        p50, p90, p99 = statistics.median(values), percentile(values, 90), percentile(values, 99)
        print(f"{name:>16} {len(values):>10} {p50:>8.2f} {p90:>8.2f} {p99:>8.2f} {max(values):>8.2f}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"peak RSS {peak:.0f} MB (cluster, memo and every decision's result)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
