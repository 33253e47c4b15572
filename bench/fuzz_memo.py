"""Differential fuzzing of the decider's memo at the sizes where its kept state matters.

``SnapshotMemo`` keeps stage runs, per-worker outcomes, spread standings and rankings
across decisions and must never change a result. The property tests check that on
clusters of 3–12 workers; this drives the kept paths that only a larger cluster and a
long run reach (patched runs, range moves, replicas' standings, bounded tables) with
the events a real cluster has, and fails on the first decision whose result differs
from the core deciding alone (same request, no memo).

Each round is one seed: a cluster of ``--workers`` hosts of mixed shapes (8 × H100,
4 × RTX 4090, 2 × MI300X, mixed CUDA and ROCm, some not ready, two racks), 0, 1
or 3 instances running on every worker and as many again at random, then
``--steps`` decisions with the chain of ``configs/chain.json`` (16 shown), the same
with 3 shown, or GPUStack's default chain (all shown), mostly for replicas of a
few deployments (each of some size and tensor-parallel size, spread or binpack, one
in five under ``policy: precise``, sometimes sharing GPUs), now and then a deployment
of its own, a label selector or a manual GPU pick. Between
decisions the cluster moves as the service's fold moves it: the pick is booked
(the instance tuple extended, as the mirror does), instances are released, a worker's
row is replaced (state, labels, GPUs, memory in use), a worker is lost or joins,
and now and then the whole snapshot is validated again (new objects, as a restarted
decider sees it).

    .venv/bin/python bench/fuzz_memo.py --seconds 600
    .venv/bin/python bench/fuzz_memo.py --seed 12 --workers 300 --steps 400   # one round again

Prints each round (seed, decisions, how many were scheduled) and exits 1 with the
seed and step of the first difference.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.builders

from scheduler_core import (
    DEFAULT_CHAIN,
    Chain,
    ModelInstance,
    ScheduleRequest,
    SnapshotMemo,
    Worker,
    deciding,
    extended,
    schedule,
)
from tasks.decision.booking import candidate_instance
from tasks.intake.chain_config import load_chain
from tests.builders import (
    GIB,
    H100,
    LLAMA_3_8B,
    MI300X,
    RTX_4090,
    first_gpu_selector,
    gpu,
    weight_for_estimate,
    worker,
)

ROOT = Path(__file__).resolve().parent.parent

_SHAPES = ("h100x8", "h100x8", "h100x8", "4090x4", "mi300x2", "mixed", "h100x2")


def _worker_row(rng: random.Random, worker_id: int) -> dict[str, Any]:
    shape = rng.choice(_SHAPES)
    if shape == "4090x4":
        gpus = [gpu(i, RTX_4090) for i in range(4)]
    elif shape == "mi300x2":
        gpus = [gpu(i, MI300X, type_="rocm", vendor="amd") for i in range(2)]
    elif shape == "mixed":
        gpus = [gpu(i, H100) for i in range(4)]
        gpus += [gpu(i, MI300X, type_="rocm", vendor="amd") for i in range(2)]
    else:
        gpus = [gpu(i, H100) for i in range(int(shape.rsplit("x", 1)[1]))]
    for device in gpus:
        if rng.random() < 0.1:  # memory other processes hold (read by policy: precise only)
            device["memory"]["used"] = rng.choice((2, 9)) * GIB
    return worker(
        worker_id, f"w{worker_id:05d}", gpus,
        state=rng.choice(("ready",) * 12 + ("not_ready",)),
        labels={"rack": rng.choice(("a", "b"))},
        reserved_vram=rng.choice((0, 0, 0, GIB)),
    )


def _instance_row(rng: random.Random, number: int, host: Worker) -> dict[str, Any] | None:
    gpus = [g for g in host.gpus if g.index is not None and g.total]
    if not gpus:
        return None
    device = rng.choice(gpus)
    share = rng.choice((0.05, 0.1, 0.15, 0.3))
    return {
        "id": number, "name": f"running-{number}", "model_id": 50_000 + number % 13,
        "model_name": f"small-{number % 13}", "backend": "SGLang", "state": "running",
        "worker_id": host.id, "worker_name": host.name, "gpu_type": device.type,
        "gpu_indexes": [device.index],
        "computed_resource_claim": {"vram": {str(device.index): int(device.total * share)},
                                    "vram_utilization": share},
    }


def _model(rng: random.Random, model_id: int) -> dict[str, Any]:
    """A deployment: its size, tensor-parallel size, placement strategy and policy."""
    tp = rng.choice((None, None, 1, 2, 2, 4, 4, 8))
    return {
        "model": {
            "id": 1000 + model_id, "name": f"m{model_id}", "backend": "SGLang",
            "backend_parameters": [] if tp is None else ["--tp-size", str(tp)],
            "categories": ["llm"], "cluster_id": 1,
            "placement_strategy": rng.choice(("spread", "spread", "spread", "binpack")),
            "weight_bytes": weight_for_estimate(rng.choice((6, 14, 30, 70, 150, 400))),
            "hf_config": LLAMA_3_8B,
        },
        **({"policy": "precise", "gpu_sharing": rng.random() < 0.3} if rng.random() < 0.2 else {}),
    }


def _request(
    rng: random.Random, step: int, workers: tuple[Worker, ...], catalogue: list[dict[str, Any]]
) -> dict[str, Any]:
    """Mostly a replica of one of the round's deployments (a decider sees the same request
    shapes again and again); now and then a deployment of its own, a label selector or a
    manual GPU pick."""
    if rng.random() < 0.1:
        template = _model(rng, 100 + step)
    else:
        template = rng.choice(catalogue)
    request: dict[str, Any] = {**template, "request_id": f"fuzz-{step}", "model": dict(template["model"])}
    row = request["model"]
    if rng.random() < 0.05:
        row["worker_selector"] = {"rack": rng.choice(("a", "b"))}
    if rng.random() < 0.03 and workers:
        selector = first_gpu_selector(rng.choice(workers))
        if selector:
            row["gpu_selector"] = selector
    return request


class _Cluster:
    """The fold's view: tuples of row objects, reused while unchanged."""

    def __init__(self, rng: random.Random, size: int) -> None:
        self.rng = rng
        self.workers = tuple(Worker.model_validate(_worker_row(rng, i)) for i in range(1, size + 1))
        # every worker holds ``base`` instances (0: the least loaded hold none, and the spread
        # range seldom moves; 1 or 3: it moves when the last of the least loaded changes)
        base = rng.choice((0, 1, 3))
        hosts = [w for w in self.workers for _ in range(base)]
        hosts += [rng.choice(self.workers) for _ in range(size)]
        rows = (_instance_row(rng, n, host) for n, host in enumerate(hosts, start=1))
        self.instances = tuple(ModelInstance.model_validate(row) for row in rows if row is not None)
        self.next_id = size + 1

    def book(self, chosen: Any, number: int, model: Any) -> None:
        booked = candidate_instance(
            chosen, id=1_000_000 + number, name=f"booked-{number}", model_id=model.id,
            model_name=model.name, backend=model.backend, state="scheduled",
        )
        self.instances = extended(self.instances, (booked,))

    def move(self) -> None:
        """One random change of the cluster."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.35 and self.instances:
            self._release(rng.randrange(len(self.instances)))
        elif roll < 0.55:  # the spread range moves when the last of the least loaded gains one
            self._place(min(self.workers, key=self._loads()))
        elif roll < 0.7 and self.instances:  # ... or the last of the most loaded loses one
            top = max(self.workers, key=self._loads()).id
            self._release(next(n for n, i in enumerate(self.instances) if i.worker_id == top))
        elif roll < 0.85:
            self._place(rng.choice(self.workers))
        elif roll < 0.92:
            position = rng.randrange(len(self.workers))
            replaced = Worker.model_validate(_worker_row(rng, self.workers[position].id))
            self.workers = (*self.workers[:position], replaced, *self.workers[position + 1:])
        elif roll < 0.94 and len(self.workers) > 4:
            count = max(1, len(self.workers) // rng.choice((50, 10)))
            lost = set(rng.sample(range(len(self.workers)), k=count))
            gone = {self.workers[i].id for i in lost}
            self.workers = tuple(w for i, w in enumerate(self.workers) if i not in lost)
            self.instances = tuple(i for i in self.instances if i.worker_id not in gone)
        elif roll < 0.98:
            self.workers = (*self.workers, Worker.model_validate(_worker_row(rng, self.next_id)))
            self.next_id += 1
        else:  # a restarted decider's snapshot: every row a new object
            self.workers = tuple(Worker.model_validate(w.model_dump()) for w in self.workers)
            self.instances = tuple(ModelInstance.model_validate(i.model_dump()) for i in self.instances)

    def _loads(self) -> Callable[[Worker], tuple[int, int]]:
        """Each worker's instances (then its id; a worker without GPUs last), counted once:
        the spread score's count."""
        counts = Counter(instance.worker_id for instance in self.instances)
        return lambda worker: (counts[worker.id] if worker.gpus else 1 << 30, worker.id)

    def _release(self, position: int) -> None:
        self.instances = self.instances[:position] + self.instances[position + 1:]

    def _place(self, host: Worker) -> None:
        row = _instance_row(self.rng, 2_000_000 + self.rng.randrange(10**6), host)
        if row is not None:
            self.instances = extended(self.instances, (ModelInstance.model_validate(row),))


class Difference(AssertionError):
    """A decision with the memo that is not the core's alone."""


def chains() -> dict[str, Chain]:
    """The chains a round decides with, by name."""
    service = load_chain(ROOT / "configs" / "chain.json").chain
    three = replace(service, max_candidates=3)
    return {"service": service, "default": DEFAULT_CHAIN, "service, 3 shown": three}


def fuzz_round(seed: int, size: int, steps: int, chain: Chain) -> tuple[int, int]:
    """One seed's decisions; (decided, scheduled). Raises :class:`Difference` at the first
    decision whose result differs from the core's alone."""
    rng = random.Random(seed)
    cluster = _Cluster(rng, size)
    memo = SnapshotMemo()
    catalogue = [_model(rng, model_id) for model_id in range(rng.randint(2, 6))]
    scheduled = 0
    for step in range(steps):
        raw = _request(rng, step, cluster.workers, catalogue)
        request = ScheduleRequest.model_validate(raw).model_copy(
            update={"workers": cluster.workers, "model_instances": cluster.instances}
        )
        with deciding():
            kept = schedule(request, chain=chain, memo=memo)
            fresh = schedule(request, chain=chain)
        if kept.model_dump_json() != fresh.model_dump_json():
            raise Difference(f"seed {seed} (--workers {size} --steps {steps}), step {step}: "
                             f"the decision with the memo differs from the core deciding alone")
        if kept.selected is not None and not kept.candidates[kept.selected].overcommit:
            scheduled += 1
            if rng.random() < 0.85:
                cluster.book(kept.candidates[kept.selected], step, request.model)
        for _ in range(rng.choice((0, 0, 1, 1, 2))):
            cluster.move()
    return steps, scheduled


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="rounds until this much time has passed")
    parser.add_argument("--seed", type=int, default=None, help="run this one round only")
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=0, help="cluster size (0: 40–600, by seed)")
    parser.add_argument("--steps", type=int, default=300, help="decisions per round")
    args = parser.parse_args(argv)
    by_name = chains()
    deadline = time.monotonic() + args.seconds
    seed = args.first_seed if args.seed is None else args.seed
    rounds = decided = 0
    while True:
        rng = random.Random(seed)
        sized, name = rng.choice((40, 120, 300, 600)), rng.choice(sorted(by_name))
        size = args.workers or sized
        started = time.monotonic()
        try:
            count, scheduled = fuzz_round(seed, size, args.steps, by_name[name])
        except Difference as difference:
            print(f"{difference} (chain {name})")
            return 1
        rounds += 1
        decided += count
        print(f"seed {seed}: {size} workers, chain {name}: {count} decisions identical "
              f"({scheduled} scheduled) in {time.monotonic() - started:.1f} s", flush=True)
        if args.seed is not None or time.monotonic() >= deadline:
            break
        seed += 1
    print(f"{rounds} rounds, {decided} decisions, every one identical to the core deciding alone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
