"""A digest of many decisions: run it before and after a change that must not change a result.

Decides a fixed corpus and prints, per part, how many results and the sha256 of
their JSON (and one digest over every part). The same digests before and after a
change say that every one of these results is byte-identical:

* ``cold``: GPUStack-shaped fleets (``bench/fleet.py``, 60 and 250 workers × 8 GPUs,
  idle and with two instances per worker), the three bench models, spread and
  binpack, ``policy: gpustack`` and ``precise``: ``schedule()`` without a memo, every
  candidate listed;
* ``trace``: ``bench/workload.py``'s deployment traces (seeds 1 and 2: arrivals and
  departures on a mixed fleet), decided by one long-lived decider (a memo) with the
  service chain (``configs/chain.json``: 16 candidates) and with GPUStack's (all);
* ``service``: ``bench_decider.py``'s cluster and mix at 400 × 8 with 800 instances,
  each model new (``models 0``) and cycling over 10 models (replicas), with a memo.

``--check`` also decides every memo decision without the memo and stops at the first
that differs.

    .venv/bin/python bench/result_digest.py
    .venv/bin/python bench/result_digest.py --check
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_service import MIXES, ROOT, cluster, plan, running_instances
from fleet import BENCH_MODELS, bench_request, gpustack_fleet
from workload import cluster as trace_cluster
from workload import trace

from scheduler_core import DEFAULT_CHAIN, ModelInstance, ScheduleRequest, SnapshotMemo, Worker, schedule
from scheduler_core.framework import Chain
from tasks.decision.booking import candidate_instance
from tasks.intake.chain_config import load_chain

Decide = Callable[[ScheduleRequest], str]


def cold() -> Iterator[str]:
    """Cold decisions on the bench fleets, every candidate listed."""
    for workers, instances in ((60, 0), (60, 120), (250, 0), (250, 500)):
        rows, placed = gpustack_fleet(workers, instances)
        for name in sorted(BENCH_MODELS):
            for strategy in ("spread", "binpack"):
                for policy in ("gpustack", "precise"):
                    raw = bench_request(name, rows, placed)
                    raw["model"]["placement_strategy"] = strategy
                    raw["policy"] = policy
                    yield schedule(raw).model_dump_json()


def _walk(
    chain: Chain,
    requests: Iterator[tuple[dict[str, Any], list[int]]],
    workers: list[Worker],
    running: list[ModelInstance],
    check: bool,
) -> Iterator[str]:
    """Decide each request with one memo on ``running`` and the picks booked so far; each
    request also names the bookings (by request number) released before it."""
    memo = SnapshotMemo()
    booked: dict[int, ModelInstance] = {}
    for number, (row, releases) in enumerate(requests):
        for gone in releases:
            booked.pop(gone, None)
        request = ScheduleRequest.model_validate(row).model_copy(
            update={"workers": workers, "model_instances": [*running, *booked.values()]}
        )
        decided = schedule(request, chain=chain, memo=memo)
        text = decided.model_dump_json()
        if check and text != schedule(request, chain=chain).model_dump_json():
            raise SystemExit(f"decision {number} ({row['request_id']}): the memo changed the result")
        yield text
        if decided.selected is not None:
            model = request.model
            booked[number] = candidate_instance(
                decided.candidates[decided.selected], id=1_000_000 + number, name=f"booked-{number}",
                model_id=model.id, model_name=model.name, backend=model.backend, state="scheduled",
            )


def _trace_requests(seed: int) -> Iterator[tuple[dict[str, Any], list[int]]]:
    ends: dict[int, list[int]] = {}
    for deployment in trace(seed):
        ends.setdefault(deployment.number + deployment.lifetime, []).append(deployment.number)
        row = {"request_id": f"t{seed}-{deployment.number}", "model": deployment.model}
        yield row, ends.pop(deployment.number, [])


def traces(check: bool) -> Iterator[str]:
    """The workload traces, decided by a long-lived decider with both chains."""
    service = load_chain(ROOT / "configs" / "chain.json").chain
    for seed in (1, 2):
        workers = [Worker.model_validate(row) for row in trace_cluster(seed)]
        for chain in (service, replace(DEFAULT_CHAIN, max_candidates=None)):
            yield from _walk(chain, _trace_requests(seed), workers, [], check)


def service(check: bool) -> Iterator[str]:
    """The service bench's cluster and mix, new models and replicas."""
    chain = load_chain(ROOT / "configs" / "chain.json").chain
    snapshot = cluster(400, 8)
    workers = [Worker.model_validate(row) for row in snapshot["workers"]]
    running = [ModelInstance.model_validate(row) for row in running_instances(400, 8, 800)]
    for models in (0, 10):
        rows = plan(300, MIXES["mixed"], f"digest{models}")
        if models:
            for number, row in enumerate(rows):
                row["model"]["id"] = 1000 + number % models

        def requests(rows: list[dict[str, Any]] = rows) -> Iterator[tuple[dict[str, Any], list[int]]]:
            for number, row in enumerate(rows):  # every fifth booking released five requests later
                yield row, [number - 5] if number >= 5 and number % 5 == 0 else []

        yield from _walk(chain, requests(), workers, running, check)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="also decide without the memo and compare")
    args = parser.parse_args(argv)
    whole = hashlib.sha256()
    parts: dict[str, Callable[[], Iterator[str]]] = {
        "cold": cold, "trace": lambda: traces(args.check), "service": lambda: service(args.check),
    }
    for name, part in parts.items():
        digest, results = hashlib.sha256(), 0
        for text in part():
            digest.update(text.encode())
            digest.update(b"\n")
            results += 1
        whole.update(digest.digest())
        print(f"{name:>8} {results:>6} results  sha256 {digest.hexdigest()[:24]}", flush=True)
    print(f"{'all':>8} {'':>6}          sha256 {whole.hexdigest()[:24]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
