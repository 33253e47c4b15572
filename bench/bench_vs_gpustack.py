"""Cold ``schedule()`` side by side with GPUStack's own selector on the same requests.

For each cluster size (GPUStack-shaped rows from ``bench/fleet.py``) and model,
prints the median time of:

* **GPUStack**: ``scheduler.find_candidate`` of GPUStack 2.2.3 from PyPI (= 47277d79; filters,
  SGLang selector, scorers, pick) on rows already loaded, as GPUStack's
  scheduler holds them; run in the parity oracle's virtualenv
  (``make parity`` builds it at ``.oracle-venv``; ``ORACLE_VENV`` overrides).
* **gpusched cold**: ``schedule(request_dict)``: validation of every row,
  worker views, the decision and the rendered result, nothing kept from an
  earlier call: the core's part of what the CLI pays once it has read the request's JSON
  (reading it and importing the core come on top), and what a replay pays for its first decision.
* **gpusched decide**: the same on an already validated request.

Times are CPU time of the process (``time.process_time``), so other load on
this shared machine disturbs them less; the ratio column is GPUStack ÷ cold;
"same pick" says whether both chose the same worker, GPU type, GPUs and
subordinate workers (``bench/gpustack_timer.py``).

Usage: python bench/bench_vs_gpustack.py [--sizes 200 2000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet import BENCH_MODELS, bench_request, gpustack_fleet
from gpustack_timer import gpustack_times, oracle_python, pick_of
from timing import median_cpu_ms

from scheduler_core import ScheduleRequest, schedule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 2000], help="workers (× 8 GPUs)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per cell (median)")
    args = parser.parse_args()
    if oracle_python() is None:
        print("note: no oracle virtualenv (make parity builds it); GPUStack's column is left empty")
    columns = ("cluster", "instances", "model", "GPUStack ms", "cold ms", "decide ms", "ratio", "same pick")
    widths = (12, 9, 20, 12, 9, 10, 6, 9)
    print(" ".join(f"{c:>{w}}" for c, w in zip(columns, widths, strict=True)))
    for size, load in ((size, load) for size in args.sizes for load in (0, 2)):
        rows, placed = gpustack_fleet(size, load * size)
        requests = {name: bench_request(name, rows, placed) for name in BENCH_MODELS}
        theirs = gpustack_times(requests, args.repeat)
        for name, request in requests.items():
            parsed = ScheduleRequest.model_validate(request)
            result = schedule(parsed)
            cold = median_cpu_ms(lambda request=request: schedule(request), args.repeat)
            decide = median_cpu_ms(lambda parsed=parsed: schedule(parsed), args.repeat)
            gpustack = theirs[name]["ms"] if theirs else float("nan")
            same = ("yes" if theirs[name]["pick"] == pick_of(result) else "NO") if theirs else "-"
            ratio = gpustack / cold if theirs else float("nan")
            cells = f"{size:>7} × 8 {len(placed):>9} {name:>20}"
            print(f"{cells} {gpustack:>12.1f} {cold:>9.1f} {decide:>10.1f} {ratio:>5.1f}× {same:>9}")


if __name__ == "__main__":
    main()
