"""Failover benchmark: SIGKILL the Redis master under load and count what the clients saw.

Real processes: one master, one replica, three ``redis-sentinel`` processes
(private ports), ``--workers`` worker processes; ``--requests`` requests with
cancels and cluster events from four submitters (``tests/service/failover_run.py``
drives it, the same driver as ``tests/service/test_service_failover.py``). The
replica is frozen ``--lag`` seconds before the kill so the promoted replica
really lacks the master's last writes. Variants:

* ``kill`` — the master is killed; the old one never comes back (the deployment
  runs on one server: acknowledged by the master alone);
* ``comeback`` — the old master comes back, the Sentinels make it a replica,
  then the new master is killed too (a failover back);
* ``unacknowledged`` — ``comeback`` with ``min_replicas_acked = 0`` (no ``WAIT``, readers
  not held back, versions read count for the rollback check): what the service did
  before acknowledgements, for comparison.

Prints one JSON line of figures per variant, then a table. One run each: the
machine is shared, times are indicative.

    .venv/bin/python bench/bench_failover.py                       # 500 requests, every variant
    .venv/bin/python bench/bench_failover.py --variants kill --requests 200
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from service.failover_run import Plan, execute, figures, start_run, stop_run  # noqa: E402

VARIANTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "kill": ({"comeback": False}, {}),
    "comeback": ({"comeback": True, "fail_back": True}, {}),
    "unacknowledged": ({"comeback": True, "fail_back": True}, {"min_replicas_acked": 0}),
}


def run_variant(name: str, args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    """One run of variant ``name``; its figures (and ``error`` when it never settled)."""
    plan_fields, overrides = VARIANTS[name]
    plan = Plan(requests=args.requests, workers=args.workers, lag_s=args.lag, rate_per_s=args.rate,
                hosts=max(30, args.requests // 6), settle_s=args.settle, **plan_fields)
    started = time.monotonic()
    run = start_run(plan, directory / name, **overrides)
    error = None
    try:
        try:
            execute(run)
        except AssertionError as failed:  # it did not settle: the figures say why
            error = str(failed)
        found = figures(run)
    finally:
        stop_run(run)
    return {"variant": name, "seconds": round(time.monotonic() - started, 1), "error": error, **found}


def table(rows: list[dict[str, Any]]) -> str:
    """The figures that matter, one column per variant."""
    lines = [("figure", *(row["variant"] for row in rows))]
    for figure in ("accepted", "terminal_exactly_once", "lost", "duplicated", "handed_out_then_gone",
                   "overbooked", "ledger_equals_live_placements", "replay_identical", "data_lost_marker",
                   "results_again_s", "taken_away_entries", "raw_reader_saw_then_gone",
                   "raw_reader_duplicated", "cancels", "cluster_events", "seconds"):
        cells = []
        for row in rows:
            value = row[figure]
            cells.append(str(len(value)) if isinstance(value, list) and figure in ("lost", "duplicated",
                         "handed_out_then_gone") else json.dumps(value))
        lines.append((figure, *cells))
    width = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, width, strict=True)) for line in lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--rate", type=float, default=40.0, help="submissions per second (all submitters)")
    parser.add_argument("--lag", type=float, default=1.5, help="seconds the replica is frozen before a kill")
    parser.add_argument("--settle", type=float, default=180.0)
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=list(VARIANTS))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpusched-failover-") as folder:
        for name in args.variants:
            row = run_variant(name, args, Path(folder))
            print(json.dumps(row, default=str), flush=True)
            rows.append(row)
    print(table(rows))


if __name__ == "__main__":
    main()
