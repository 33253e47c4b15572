"""Replay the seeded trace under ``policy: gpustack``, ``precise`` and ``precise`` with GPU sharing,
every start-up judged by SGLang's own code.

Usage::

    bash tools/sglang-oracle/setup.sh          # SGLang 0.5.16's sources from PyPI (once)
    .venv/bin/python bench/bench_policies.py [--seeds 1 2 3] [--arrivals 260] [--plot docs/img/policies.png]

For each seed and policy it replays the deployments of :mod:`workload` (one arrival per
simulated hour, departures when their lifetime ends; a refused deployment is dropped). Each
placement is started by **SGLang's own start-up code** (``tools/sglang-oracle``: the fraction it
runs with, the weights every rank holds, its TP memory-balance check, the KV pool and its token
count, executed from the SGLang 0.5.16 wheel) on the GPUs' real free memory at that moment:
their total, less other processes' usage and what the running instances really take (SGLang's
context, weights and pool, plus the activation and graph reserve SGLang estimates, never more than
was free). SGLang's own context is taken as 0.5 GiB (and 0 and 1 GiB in the range table). A
placement that fails at start-up takes no memory, but keeps its claim (GPUStack keeps the row and
restarts it). It prints, per policy and seed:

* placed, placements that start, those that also hold the KV floor (the model's context capped
  at 8,192 tokens), start-up failures by SGLang's cause (``load_oom``: the weights do not load;
  ``no_pool``: nothing left for the KV cache; ``not_enough_memory``/``fewer_than_2``: fewer than
  2 tokens; ``tp_imbalance``: SGLang's TP memory-balance check);
* refused, and refusals SGLang would have started on the same state (some GPU set of a worker,
  or two workers, where SGLang's start-up with the request's own arguments succeeds; with the KV
  floor met);
* GPU-hours held (GPUs claimed × hours) and model-GiB·h served (weights of the instances that
  started × hours);
* mean GPU memory claimed, fragmentation (share of free memory on GPUs with less free than the
  median request needs per GPU), SGLang's median KV tokens per started placement;
* median decision time (CPU time of ``schedule()``) and its ratio to gpustack's.

The plot (PNG, matplotlib from the ``bench`` extra) shows, for the first seed, the placements by
outcome, memory claimed and fragmentation over time, and SGLang's KV tokens per started placement.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import statistics
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools" / "sglang-oracle"))

from workload import DEFAULT_ARRIVALS, DEFAULT_SEEDS, GIB, MIB, Deployment, cluster, trace

from scheduler_core import PolicySettings, PreciseSettings, schedule
from scheduler_core.params import BackendParameters
from scheduler_core.plugins import PRECISE_CHAIN

#: The runs: label → (policy, gpu_sharing).
RUNS: Mapping[str, tuple[str, bool]] = {
    "gpustack": ("gpustack", False),
    "precise": ("precise", False),
    "precise+sharing": ("precise", True),
}
#: SGLang's own context per GPU (GiB) in the main table, and the range checked besides.
CONTEXT = 0.5
CONTEXT_RANGE = (0.0, 0.5, 1.0)
FLOOR_CAP = 8192
CAUSES = ("load_oom", "no_pool", "not_enough_memory", "fewer_than_2", "tp_imbalance")

GpuKey = tuple[int, str | None, int]


def _oracle() -> Any:
    """``tools/sglang-oracle/launch.py``, or a one-line exit when SGLang is not unpacked."""
    try:
        import launch
    except (FileNotFoundError, AssertionError, OSError) as error:
        sys.exit(
            f"bench_policies: SGLang's sources are missing ({error}); run bash tools/sglang-oracle/setup.sh"
        )
    return launch


@dataclass
class Run:
    """What one replay measured."""

    label: str
    placed: int = 0
    started: int = 0
    with_floor: int = 0
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0))
    refused: int = 0
    refused_startable: int = 0
    refused_startable_floor: int = 0
    gpu_hours: float = 0.0
    gib_hours: float = 0.0
    kv: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    claimed: list[float] = field(default_factory=list)
    fragmentation: list[float] = field(default_factory=list)

    @property
    def failed(self) -> int:
        """Start-up failures of every cause."""
        return sum(self.failures.values())


@dataclass
class Instance:
    """A placed deployment: its row for the scheduler, the GPUs it holds and what it really uses."""

    leaves: int
    row: dict[str, Any]
    gpus: list[GpuKey]
    use: dict[GpuKey, int]  # real bytes per GPU (0 when it failed to start)
    served_gib: float  # weights GiB when it started, else 0


def _gpus(workers: Sequence[dict[str, Any]]) -> dict[GpuKey, tuple[int, int, str]]:
    """(worker, type, index) → (total, outside use, platform)."""
    found = {}
    for worker in workers:
        for gpu in worker["status"]["gpu_devices"]:
            kind = gpu["type"]
            found[(worker["id"], kind, gpu["index"])] = (gpu["memory"]["total"], gpu["memory"]["used"], kind)
    return found


def _claims(instances: Iterable[Instance]) -> dict[GpuKey, int]:
    held: dict[GpuKey, int] = {}
    for instance in instances:
        row = instance.row
        nodes = [(row["worker_id"], row["computed_resource_claim"])]
        nodes += [(s["worker_id"], s["computed_resource_claim"]) for s in row.get("subordinates", ())]
        for worker_id, claim in nodes:
            for index, amount in claim["vram"].items():
                key = (worker_id, row["gpu_type"], int(index))
                held[key] = held.get(key, 0) + amount
    return held


def _uses(instances: Iterable[Instance]) -> dict[GpuKey, int]:
    used: dict[GpuKey, int] = {}
    for instance in instances:
        for key, amount in instance.use.items():
            used[key] = used.get(key, 0) + amount
    return used


def _rows(workers: Sequence[dict[str, Any]], used: Mapping[GpuKey, int]) -> list[dict[str, Any]]:
    """Worker rows whose ``memory.used`` reports what the GPUs really hold."""
    rows = []
    for worker in workers:
        gpus = []
        for gpu in worker["status"]["gpu_devices"]:
            key = (worker["id"], gpu["type"], gpu["index"])
            total = gpu["memory"]["total"]
            gpus.append({**gpu, "memory": {**gpu["memory"], "used": min(used.get(key, 0), total)}})
        rows.append({**worker, "status": {**worker["status"], "gpu_devices": gpus}})
    return rows


def _instance_row(number: int, model: dict[str, Any], chosen: Any) -> dict[str, Any]:
    claim = chosen.computed_resource_claim.model_dump(mode="json")
    subs = [
        {
            "worker_id": s.worker_id,
            "worker_name": s.worker_name,
            "gpu_type": s.gpu_type,
            "gpu_indexes": s.gpu_indexes,
            "computed_resource_claim": s.computed_resource_claim.model_dump(mode="json"),
        }
        for s in chosen.subordinate_workers or ()
    ]
    row = {
        "id": number,
        "name": model["name"],
        "model_id": model["id"],
        "state": "running",
        "worker_id": chosen.worker_id,
        "gpu_type": chosen.gpu_type,
        "gpu_indexes": chosen.gpu_indexes,
        "computed_resource_claim": claim,
        "subordinates": subs,
    }
    if subs:
        row["distributed_servers"] = {"subordinate_workers": subs}
    return row


def _chosen_gpus(chosen: Any) -> list[GpuKey]:
    """The placement's GPUs in rank order: the leader's, then each follower's."""
    keys = [(chosen.worker_id, chosen.gpu_type, i) for i in chosen.gpu_indexes]
    for sub in chosen.subordinate_workers or ():
        keys += [(sub.worker_id, chosen.gpu_type, i) for i in sub.gpu_indexes]
    return keys


def _launched_argv(result: Any) -> list[str]:
    launch = result.launch
    if launch is None:
        return []
    return list(launch.nodes[0].backend_parameters if launch.nodes else launch.backend_parameters)


# --------------------------------------------------------------------------- SGLang's start-up


@dataclass(frozen=True)
class Outcome:
    """SGLang's start-up of a placement: the cause when it fails, its tokens and per-GPU use."""

    cause: str | None
    tokens: int | None
    floor: int
    use: tuple[int, ...]  # bytes per GPU, rank order


def _floor(oracle: Any, model: Mapping[str, Any], context_len: int) -> int:
    cap = oracle.parse(model["backend_parameters"])[0].get("max_total_tokens")
    floor = min(context_len, FLOOR_CAP)
    return floor if cap is None else min(floor, cap)


def _diffusion(
    model: Mapping[str, Any], frees: Sequence[tuple[int, int]], booked: Sequence[int], context: float
) -> Outcome:
    """SGLang Diffusion: the weights and its context load on every GPU, or it fails."""
    need = model["weight_bytes"] + int(context * GIB)
    if need > min(free for _, free in frees):
        return Outcome("load_oom", None, 0, tuple(0 for _ in frees))
    return Outcome(
        None, None, 0, tuple(min(free, max(b, need)) for (_, free), b in zip(frees, booked, strict=True))
    )


def start(
    oracle: Any,
    model: Mapping[str, Any],
    argv: Sequence[str],
    frees: Sequence[tuple[int, int]],
    booked: Sequence[int],
    context: float,
    rocm: bool = False,
) -> Outcome:
    """What SGLang does with ``model`` launched with ``argv`` on GPUs with ``frees`` ((total, free)
    in rank order): the fraction, rank weights, balance check and pool are SGLang's own code."""
    if model.get("hf_config") is None:
        return _diffusion(model, frees, booked, context)
    outcome = oracle.launch(model, list(argv), list(frees), context, hip=rocm)
    if outcome.fatal is not None:
        return Outcome("fatal", None, 0, tuple(0 for _ in frees))
    floor = _floor(oracle, model, outcome.context_len)
    if outcome.cause is not None:
        return Outcome(outcome.cause, outcome.tokens, floor, tuple(0 for _ in frees))
    return Outcome(None, outcome.tokens, floor, tuple(_use(outcome, frees, context)))


def _use(outcome: Any, frees: Sequence[tuple[int, int]], context: float) -> list[int]:
    """Per GPU: SGLang's context, the rank's weights, the pool, and SGLang's activation and graph
    reserve (its own estimate, without the 10 GiB floor), never more than was free."""
    tp = len(frees) // max(len(outcome.starts), 1) // max(len(outcome.weights), 1)
    reserve = int(outcome.reserve_mib * MIB)
    use = []
    for rank, (_, free) in enumerate(frees):
        replica = min(rank // max(tp * len(outcome.weights), 1), len(outcome.starts) - 1)
        stage = (rank % max(tp * len(outcome.weights), 1)) // max(tp, 1)
        rest = outcome.starts[replica].rest_bytes or 0
        tokens = outcome.starts[replica].tokens or 0
        pool = min(rest, tokens * outcome.cells[stage])
        need = int(context * GIB) + outcome.weights[stage] + pool + reserve
        use.append(min(need, free))
    return use


# --------------------------------------------------------------------------- refusals


def _world(model: Mapping[str, Any]) -> int | None:
    params = BackendParameters(model["backend_parameters"])
    sizes = [params.find_int([name]) or 1 for name in ("tp-size", "pp-size", "dp-size")]
    given = any(params.find_int([name]) for name in ("tp-size", "pp-size", "dp-size"))
    return sizes[0] * sizes[1] * sizes[2] if given else None


def _sets(
    workers: Sequence[dict[str, Any]], free: Mapping[GpuKey, int], world: int | None
) -> list[list[GpuKey]]:
    """GPU sets to try: on each worker every run of ``n`` GPUs by free memory (n the world size, or
    1, 2, 4, 8), and across two workers of one GPU type their ``n/2`` freest GPUs each."""
    by_worker: dict[tuple[int, str], list[GpuKey]] = {}
    for key in sorted(free, key=lambda k: (-free[k], k)):
        by_worker.setdefault((key[0], key[1] or ""), []).append(key)
    counts = [world] if world else [1, 2, 4, 8]
    sets = []
    for gpus in by_worker.values():
        for n in counts:
            sets += [gpus[i : i + n] for i in range(len(gpus) - n + 1)]
    for n in counts:
        per = n // 2 if n >= 2 and n % 2 == 0 else 0
        pairs = [g[:per] for g in by_worker.values() if per and len(g) >= per]
        pairs.sort(key=lambda g: -min(free[k] for k in g))
        for first, second in itertools.pairwise(pairs):
            if first[0][1] == second[0][1]:
                sets.append(first + second)
    return sets


def _argv_for(model: Mapping[str, Any], size: int, world: int | None) -> list[str]:
    """The request's own arguments; without a world size SGLang runs tp = the set's GPUs."""
    argv = list(model["backend_parameters"])
    return argv if world else [*argv, "--tp-size", str(size)]


def startable(
    oracle: Any,
    model: Mapping[str, Any],
    workers: Sequence[dict[str, Any]],
    gpus: Mapping[GpuKey, tuple[int, int, str]],
    free: Mapping[GpuKey, int],
    context: float,
) -> tuple[bool, bool]:
    """(SGLang starts the request on some GPU set, and with the KV floor met) on this state."""
    world = _world(model)
    starts = False
    for keys in _sets(workers, free, world):
        kinds = {gpus[k][2] for k in keys}
        if len(kinds) > 1:
            continue
        frees = [(gpus[k][0], free[k]) for k in keys]
        argv = _argv_for(model, len(keys), world)
        outcome = start(oracle, model, argv, frees, [0] * len(keys), context, "rocm" in kinds)
        if outcome.cause is None:
            starts = True
            if outcome.tokens is None or outcome.tokens >= outcome.floor:
                return True, True
    return starts, False


# --------------------------------------------------------------------------- the replay


def _median_need(deployments: Sequence[Deployment]) -> float:
    needs = []
    for deployment in deployments:
        params = BackendParameters(deployment.model["backend_parameters"])
        ranks = (params.find_int(["tp-size"]) or 1) * (params.find_int(["pp-size"]) or 1)
        needs.append(deployment.model["weight_bytes"] / ranks + 2 * GIB)
    return statistics.median(needs)


def _measure(
    run: Run, gpus: Mapping[GpuKey, tuple[int, int, str]], running: Sequence[Instance], need: float
) -> None:
    total = sum(t for t, _, _ in gpus.values())
    claims = _claims(running)
    run.claimed.append(sum(claims.values()) / total)
    uses = _uses(running)
    frees = [max(t - o - uses.get(k, 0), 0) for k, (t, o, _) in gpus.items()]
    free = sum(frees)
    run.fragmentation.append(sum(f for f in frees if f < need) / free if free else 0.0)
    run.gpu_hours += len({key for instance in running for key in instance.gpus})
    run.gib_hours += sum(instance.served_gib for instance in running)


@dataclass
class _State:
    workers: list[dict[str, Any]]
    gpus: dict[GpuKey, tuple[int, int, str]]
    running: list[Instance]

    def free(self) -> dict[GpuKey, int]:
        uses = _uses(self.running)
        return {k: max(t - o - uses.get(k, 0), 0) for k, (t, o, _) in self.gpus.items()}


def _place(
    oracle: Any, run: Run, state: _State, deployment: Deployment, result: Any, step: int, context: float
) -> None:
    chosen = result.candidates[result.selected]
    keys = _chosen_gpus(chosen)
    free = state.free()
    booked = [chosen.computed_resource_claim.vram.get(str(k[2]), 0) for k in keys[: len(chosen.gpu_indexes)]]
    for sub in chosen.subordinate_workers or ():
        booked += [sub.computed_resource_claim.vram.get(str(i), 0) for i in sub.gpu_indexes]
    model = deployment.model
    frees = [(state.gpus[k][0], free[k]) for k in keys]
    rocm = state.gpus[keys[0]][2] == "rocm"
    outcome = start(oracle, model, _launched_argv(result), frees, booked, context, rocm)
    run.placed += 1
    started = outcome.cause is None
    if started:
        run.started += 1
        run.with_floor += int(outcome.tokens is None or outcome.tokens >= outcome.floor)
        if outcome.tokens is not None:
            run.kv.append(outcome.tokens)
    else:
        run.failures[outcome.cause] = run.failures.get(outcome.cause, 0) + 1
    served = model["weight_bytes"] / GIB if started else 0.0
    row = _instance_row(step + 1, model, chosen)
    use = dict(zip(keys, outcome.use, strict=True))
    state.running.append(Instance(step + deployment.lifetime, row, keys, use, served))


def replay(
    seed: int,
    label: str,
    arrivals: int,
    context: float = CONTEXT,
    refusals: bool = True,
    margin: int = 0,
) -> Run:
    """One policy over one seed's trace, every start-up SGLang's (its own context ``context`` GiB);
    ``margin``: precise's ``admission_margin`` (bytes)."""
    oracle = _oracle()
    policy, sharing = RUNS[label]
    chain = None
    if margin:
        settings = PolicySettings.of(PreciseSettings(admission_margin=margin))
        chain = dataclasses.replace(PRECISE_CHAIN, settings=settings)
    workers = cluster(seed)
    deployments = trace(seed, arrivals)
    gpus = _gpus(workers)
    need = _median_need(deployments)
    run = Run(label)
    state = _State(workers, gpus, [])
    outside = {key: used for key, (_, used, _) in gpus.items()}
    for step, deployment in enumerate(deployments):
        state.running = [i for i in state.running if i.leaves > step]
        uses = _uses(state.running)
        reported = {k: outside[k] + uses.get(k, 0) for k in gpus}
        request = {
            "request_id": f"{label}-{step}",
            "policy": policy,
            "model": deployment.model,
            "workers": _rows(workers, reported),
            "model_instances": [i.row for i in state.running],
        }
        if sharing:
            request["gpu_sharing"] = True
        started = time.process_time()
        result = schedule(request, chain=chain)
        run.times.append(time.process_time() - started)
        if result.status == "scheduled" and result.selected is not None:
            _place(oracle, run, state, deployment, result, step, context)
        else:
            run.refused += 1
            if refusals:
                ok, floor = startable(oracle, deployment.model, workers, gpus, state.free(), context)
                run.refused_startable += ok
                run.refused_startable_floor += floor
        _measure(run, gpus, state.running, need)
    return run


# --------------------------------------------------------------------------- output


HEADER = (
    "| seed | policy | placed | start | start, floor met | start-up failures (load_oom / no_pool / "
    "<2 tokens / tp_imbalance) | refused | refused, SGLang starts (floor met) | GPU-h held | model-GiB·h "
    "served | mean claimed | mean fragmentation | median KV tokens | median decision |"
)


def _row(seed: int, run: Run) -> str:
    kv = int(statistics.median(run.kv)) if run.kv else 0
    few = run.failures["not_enough_memory"] + run.failures["fewer_than_2"]
    fails = run.failures
    causes = f"{run.failed} ({fails['load_oom']} / {fails['no_pool']} / {few} / {fails['tp_imbalance']})"
    return (
        f"| {seed} | {run.label} | {run.placed} | {run.started} | {run.with_floor} | {causes} "
        f"| {run.refused} | {run.refused_startable} ({run.refused_startable_floor}) "
        f"| {run.gpu_hours:,.0f} | {run.gib_hours:,.0f} "
        f"| {100 * statistics.mean(run.claimed):.1f} % | {100 * statistics.mean(run.fragmentation):.1f} % "
        f"| {kv:,} | {1000 * statistics.median(run.times):.2f} ms |"
    )


def _summary(seed: int, runs: Sequence[Run]) -> str:
    base = runs[0]
    parts = []
    for run in runs[1:]:
        gain = 100 * (run.with_floor / max(base.with_floor, 1) - 1)
        ratio = statistics.median(run.times) / statistics.median(base.times)
        parts.append(f"{run.label}: start with the floor met {gain:+.1f} %, decision time {ratio:.2f}×")
    return f"|   | seed {seed} vs gpustack: " + "; ".join(parts) + " |"


def _plot(path: Path, seed: int, runs: Sequence[Run]) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]'): no plot"
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    labels = [run.label for run in runs]
    floor = [run.with_floor for run in runs]
    below = [run.started - run.with_floor for run in runs]
    failed = [run.failed for run in runs]
    bars = axes[0][0]
    bars.bar(labels, floor, label="start, KV floor met")
    bars.bar(labels, below, bottom=floor, label="start, below the floor")
    bars.bar(
        labels, failed, bottom=[a + b for a, b in zip(floor, below, strict=True)], label="fail at start-up"
    )
    for index, run in enumerate(runs):
        bars.annotate(
            f"{run.placed} placed, {run.refused} refused", (index, run.placed), ha="center", va="bottom"
        )
    bars.set(title="placements by SGLang's start-up outcome (whole run)", ylabel="deployments")
    bars.set_ylim(0, 1.15 * max(run.placed for run in runs))
    for run in runs:
        axes[0][1].plot([100 * u for u in run.claimed], label=run.label)
        axes[1][0].plot([100 * f for f in run.fragmentation], label=run.label)
    axes[0][1].set(title="GPU memory claimed (% of all GPU memory)", xlabel="arrival (hour)")
    axes[1][0].set(
        title="free memory on GPUs with less free than the median need (%)", xlabel="arrival (hour)"
    )
    axes[1][1].hist([[t / 1000 for t in run.kv] for run in runs], bins=30, label=labels, log=True)
    axes[1][1].set(title="SGLang's KV tokens per started placement (thousands)", ylabel="placements")
    for ax in (bars, axes[0][1], axes[1][0], axes[1][1]):
        ax.legend()
    fig.suptitle(f"gpustack vs precise, seed {seed} (start-ups judged by SGLang 0.5.16's own code)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return f"plot: {path}"


#: The ``admission_margin`` the range table also runs precise with: the range's half-width.
RANGE_MARGIN = 512 * MIB


def _context_range(seeds: Sequence[int], arrivals: int) -> None:
    """precise keeps its default 0.5 GiB context; SGLang's real one is 0, 0.5 or 1 GiB."""
    print("\n| SGLang's real context | policy | start-up failures per seed | start, floor met per seed |")
    print("| --- | --- | --- | --- |")
    variants = [(label, 0) for label in RUNS] + [("precise", RANGE_MARGIN)]
    for context in CONTEXT_RANGE:
        for label, margin in variants:
            runs = [replay(seed, label, arrivals, context, refusals=False, margin=margin) for seed in seeds]
            failed = " / ".join(str(r.failed) for r in runs)
            floor = " / ".join(str(r.with_floor) for r in runs)
            name = f"{label}, admission_margin 512 MiB" if margin else label
            print(f"| {context} GiB | {name} | {failed} | {floor} |", flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    """Replay every seed under every policy and print the tables (and write the plot)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(DEFAULT_SEEDS))
    parser.add_argument("--arrivals", type=int, default=DEFAULT_ARRIVALS)
    parser.add_argument("--plot", type=Path, default=Path("docs/img/policies.png"))
    parser.add_argument("--no-range", action="store_true", help="skip the 0/0.5/1 GiB context table")
    args = parser.parse_args(argv)
    print(HEADER)
    print("| " + " | ".join(["---"] * 14) + " |")
    for position, seed in enumerate(args.seeds):
        runs = [replay(seed, label, args.arrivals) for label in RUNS]
        for run in runs:
            print(_row(seed, run), flush=True)
        print(_summary(seed, runs), flush=True)
        if position == 0:
            print(_plot(args.plot, seed, runs), file=sys.stderr)
    if not args.no_range:
        _context_range(args.seeds, args.arrivals)


if __name__ == "__main__":
    main()
