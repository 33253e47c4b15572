"""Time ``scheduler_core.schedule()`` on GPUStack-shaped clusters and print a table of medians.

Clusters (``bench/fleet.py``): 10, 200 and 2000 workers × 8 GPUs as GPUStack
reports them (full status rows, ``system_reserved``, 5 % not-READY workers,
H100/A100/4090 on CUDA, MI300X on ROCm, Ascend 910B on CANN), with 0 or
2 × workers running instances (one to eight GPUs, some spanning two nodes).
Models: a 7B that needs 1 GPU, a 70B at tp 8, a 671B that needs several workers.

Columns (CPU time of this process, medians):

* **cold**: ``schedule(request_dict)``: every row validated, views built, the
  decision rendered, nothing kept from an earlier call: what a control plane calling
  ``schedule()`` without the service pays, the CLI too once it has read the JSON (reading it
  and importing the core come on top), and a replay for its first decision;
* **decide**: the same request already validated (its worker views kept on the rows);
* **warm memo**: the service's long-lived decider: the same validated rows,
  one new instance booked between decisions, one ``SnapshotMemo`` kept.

Targets: at 2000 × 8 with 4000 instances, cold ≤ 100 ms; time grows no faster
than linearly with W×G + I.

``--max-candidates N`` decides with the default chain reporting at most N
candidates (the service's ``configs/chain.json`` reports 16): without it every
candidate is rendered, as GPUStack lists them, and rendering thousands of
one-GPU candidates dominates the warm column.

Usage: python bench/bench_schedule.py [--repeat N] [--max-candidates N]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet import BENCH_MODELS, bench_request, gpustack_fleet
from timing import median_cpu_ms, warm_median_ms

from scheduler_core import DEFAULT_CHAIN, Chain, ScheduleRequest, schedule

#: The chain every decision runs (set from ``--max-candidates``; None: the request's policy's own).
CHAIN: Chain | None = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="runs per cell (median is reported)")
    parser.add_argument("--max-candidates", type=int, default=None,
                        help="report at most this many candidates (the service's chain: 16)")
    args = parser.parse_args()
    global CHAIN
    if args.max_candidates is not None:
        CHAIN = replace(DEFAULT_CHAIN, max_candidates=args.max_candidates)
    header = (
        "cluster", "instances", "model", "status", "cold ms", "decide ms", "ns per (W·G+I)", "warm memo ms"
    )
    widths = (16, 9, 20, 13, 9, 10, 15, 13)
    print(" ".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True)))
    per_unit: dict[str, list[float]] = {}
    for workers in (10, 200, 2000):
        for factor in (0, 2):
            rows, placed = gpustack_fleet(workers, factor * workers)
            for model_name in BENCH_MODELS:
                raw = bench_request(model_name, rows, placed)
                parsed = ScheduleRequest.model_validate(raw)
                status = schedule(parsed, chain=CHAIN).status
                repeat = max(3, args.repeat if workers < 2000 else args.repeat // 3)
                cold = median_cpu_ms(lambda raw=raw: schedule(raw, chain=CHAIN), repeat)
                decide = median_cpu_ms(lambda parsed=parsed: schedule(parsed, chain=CHAIN), repeat)
                warm = warm_median_ms(parsed, max(5, repeat), CHAIN)
                units = workers * 8 + len(placed)
                per_unit.setdefault(model_name, []).append(cold * 1e6 / units)
                cells = (f"{workers} × 8 GPU", len(placed), model_name, status)
                row = " ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=False))
                print(f"{row} {cold:>9.2f} {decide:>10.2f} {cold * 1e6 / units:>15.0f} {warm:>13.2f}")
    print()
    for model_name, values in per_unit.items():
        ratio = values[-1] / values[0]
        print(f"linearity {model_name}: cold ns per (W·G+I), largest / smallest cluster = {ratio:.2f}")


if __name__ == "__main__":
    main()
