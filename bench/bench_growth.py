"""How a decision's cost grows with the cluster: gpusched cold and warm, and GPUStack, 100 to 10,000 workers.

For each size W (W workers × 8 GPUs with 2 × W running instances, GPUStack-shaped
rows from ``bench/fleet.py``) and each model of ``fleet.BENCH_MODELS``, the
median CPU time (``time.process_time``) of:

* **cold**: ``schedule(request_dict)`` with the default chain: every row
  validated, nothing kept from an earlier call (the CLI, a replay);
* **warm**: the service's decider: validated rows, the chain of
  ``configs/chain.json`` (16 candidates reported), one ``SnapshotMemo`` kept,
  and one new instance booked between decisions;
* **GPUStack**: ``find_candidate`` of GPUStack 2.2.3 (``bench/gpustack_timer.py``,
  the parity oracle's virtualenv), measured at a size only while the time its
  last two sizes extrapolate to stays under ``--gpustack-limit`` seconds.

Prints one row per size and model, with GPUStack ÷ cold and whether both sides
picked the same placement. ``--plot PNG`` draws the chart (matplotlib, the
``bench`` extra: ``pip install -e '.[bench]'``), ``--json`` keeps the figures and
``--replot JSON`` redraws a chart from them without measuring.

    .venv/bin/python bench/bench_growth.py --plot docs/cost-growth.png --json /tmp/growth.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet import BENCH_MODELS, bench_request, gpustack_fleet
from gpustack_timer import ROOT, gpustack_times, oracle_python, pick_of
from timing import median_cpu_ms, warm_median_ms

from scheduler_core import Chain, ScheduleRequest, schedule
from tasks.intake.chain_config import load_chain

#: Sizes swept by default (workers × 8 GPUs).
SIZES = (100, 200, 500, 1000, 2000, 5000, 10000)


def predicted_ms(history: list[tuple[int, float]], size: int) -> float:
    """GPUStack's time at ``size`` extrapolated from its last two sizes (power law, exponent ≥ 1)."""
    if len(history) < 2:
        return history[-1][1] * size / history[-1][0] if history else 0.0
    (small, small_ms), (large, large_ms) = history[-2:]
    exponent = max(1.0, math.log(max(large_ms, 1e-3) / max(small_ms, 1e-3)) / math.log(large / small))
    return float(large_ms * (size / large) ** exponent)


def measure(sizes: list[int], limit_s: float, repeat: int) -> list[dict[str, Any]]:
    """One row per size and model (printed as it is measured)."""
    chain = load_chain(ROOT / "configs" / "chain.json").chain
    history: dict[str, list[tuple[int, float]]] = {name: [] for name in BENCH_MODELS}
    rows: list[dict[str, Any]] = []
    _print_header()
    for size in sizes:
        workers, placed = gpustack_fleet(size, 2 * size)
        requests = {name: bench_request(name, workers, placed) for name in BENCH_MODELS}
        expected = {name: predicted_ms(history[name], size) for name in BENCH_MODELS}
        timed = {name: r for name, r in requests.items() if expected[name] < limit_s * 1000}
        slow = any(expected[name] > 5000 for name in timed)
        theirs = (gpustack_times(timed, 1 if slow else repeat) or {}) if timed else {}
        for name, request in requests.items():
            row = _measure_one(size, len(placed), name, request, chain, theirs.get(name), repeat)
            if row["gpustack_ms"] is not None:
                history[name].append((size, row["gpustack_ms"]))
            rows.append(row)
            _print_row(row)
    return rows


def _measure_one(
    size: int, instances: int, name: str, request: dict[str, Any], chain: Chain,
    theirs: dict[str, Any] | None, repeat: int,
) -> dict[str, Any]:
    parsed = ScheduleRequest.model_validate(request)
    result = schedule(request)
    runs = repeat if size < 5000 else max(3, repeat // 2)
    return {
        "workers": size, "gpus": size * 8, "instances": instances, "model": name,
        "cold_ms": median_cpu_ms(lambda: schedule(request), runs),
        "warm_ms": warm_median_ms(parsed, 3 * repeat, chain),
        "gpustack_ms": theirs["ms"] if theirs else None,
        "same_pick": (theirs["pick"] == pick_of(result)) if theirs else None,
    }


_COLUMNS = (("workers", 8), ("instances", 9), ("model", 20), ("GPUStack ms", 12), ("cold ms", 9),
            ("warm ms", 8), ("ratio", 7), ("same pick", 9))


def _print_header() -> None:
    print(" ".join(f"{name:>{width}}" for name, width in _COLUMNS), flush=True)


def _print_row(row: dict[str, Any]) -> None:
    theirs = row["gpustack_ms"]
    gpustack = f"{theirs:>12.1f}" if theirs is not None else f"{'-':>12}"
    ratio = f"{theirs / row['cold_ms']:>6.1f}×" if theirs is not None else f"{'-':>7}"
    same = {None: "-", True: "yes", False: "NO"}[row["same_pick"]]
    print(f"{row['workers']:>8} {row['instances']:>9} {row['model']:>20} {gpustack} "
          f"{row['cold_ms']:>9.1f} {row['warm_ms']:>8.2f} {ratio} {same:>9}", flush=True)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """One figure, a log-log panel per model: GPUStack, gpusched cold and warm against GPUs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(row["model"] for row in rows))
    figure, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 4.0), sharey=True)
    series = (("gpustack_ms", "GPUStack 2.2.3 find_candidate", "tab:red", "s"),
              ("cold_ms", "gpusched cold schedule()", "tab:blue", "o"),
              ("warm_ms", "gpusched warm (service decider)", "tab:green", "^"))
    for axis, model in zip(axes, models, strict=True):
        mine = [row for row in rows if row["model"] == model]
        for key, label, colour, marker in series:
            points = [(row["gpus"], row[key]) for row in mine if row[key] is not None]
            axis.plot(*zip(*points, strict=True), marker=marker, color=colour, label=label)
        axis.axhline(1000, color="grey", linestyle=":", linewidth=1)
        axis.set(xscale="log", yscale="log", title=model, xlabel="GPUs (workers × 8; 2 instances per worker)")
        axis.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel("decision time, ms (CPU, median)")
    axes[0].legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    """Measure (or redraw) and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="workers (× 8 GPUs)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per cell (median)")
    parser.add_argument("--gpustack-limit", type=float, default=60.0,
                        help="measure GPUStack at a size while its extrapolated time is under this (s)")
    parser.add_argument("--plot", type=Path, help="write the chart here (PNG)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--replot", type=Path, help="redraw from figures written by --json; measure nothing")
    args = parser.parse_args(argv)
    if args.replot:
        rows = json.loads(args.replot.read_text())["rows"]
    else:
        if oracle_python() is None:
            print("note: no oracle virtualenv (make parity builds it); GPUStack's column is left empty")
        rows = measure(args.sizes, args.gpustack_limit, args.repeat)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
