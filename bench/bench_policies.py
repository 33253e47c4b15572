"""Replay the seeded trace under ``policy: gpustack``, ``precise`` and ``precise`` with GPU sharing.

Usage::

    .venv/bin/python bench/bench_policies.py [--seeds 1 2 3] [--arrivals 260] [--plot docs/img/policies.png]

For each seed and policy it replays the deployments of :mod:`workload`
(one arrival per step, departures when their lifetime ends; a refused
deployment is dropped) and prints:

* placed before the first refusal, placed in total, refused;
* placements predicted to fail at SGLang start-up: on some chosen GPU the pool
  (launch fraction × free memory at start) cannot hold the rank's weights, the
  runtime overhead and one context (the model's context capped at 8,192 tokens),
  or the free memory cannot hold those plus SGLang's activation/graph reserve;
  free memory at start is the GPU's total less other processes' usage and the
  other instances' claims (every instance is taken to use what it booked);
* mean GPU-memory utilisation (claimed / total) and fragmentation (share of free
  memory on GPUs with less free memory than the median request needs per GPU);
* median predicted KV tokens per placement (the same predictor for both policies);
* median decision time (CPU time of ``schedule()``).

The plot (PNG, matplotlib from the ``bench`` extra) shows utilisation and
fragmentation over time, placements and the KV-token distribution; the table
is printed even when matplotlib is missing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workload import DEFAULT_ARRIVALS, DEFAULT_SEEDS, GIB, MIB, Deployment, cluster, trace

from scheduler_core import schedule
from scheduler_core.params import BackendParameters
from scheduler_core.precise.fraction import Device, ModelTraits, RuntimeFlags, reserve_mib, sizing
from scheduler_core.precise.kv import kv_shape, kv_tokens

#: The runs: label → (policy, gpu_sharing).
RUNS: Mapping[str, tuple[str, bool]] = {
    "gpustack": ("gpustack", False),
    "precise": ("precise", False),
    "precise+sharing": ("precise", True),
}
OVERHEAD = 1 * GIB  # per rank, as the precise policy's default
CONTEXT_CAP = 8192

GpuKey = tuple[int, str | None, int]


@dataclass
class Run:
    """What one replay measured."""

    label: str
    placed: int = 0
    before_refusal: int | None = None
    refused: int = 0
    failures: int = 0
    kv: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    utilisation: list[float] = field(default_factory=list)
    fragmentation: list[float] = field(default_factory=list)


def _gpus(workers: Sequence[dict[str, Any]]) -> dict[GpuKey, tuple[int, int, str]]:
    """(worker, type, index) → (total, outside use, platform)."""
    found = {}
    for worker in workers:
        for gpu in worker["status"]["gpu_devices"]:
            kind = gpu["type"]
            found[(worker["id"], kind, gpu["index"])] = (gpu["memory"]["total"], gpu["memory"]["used"], kind)
    return found


def _claims(instances: Iterable[dict[str, Any]]) -> dict[GpuKey, int]:
    held: dict[GpuKey, int] = {}
    for row in instances:
        nodes = [(row["worker_id"], row["computed_resource_claim"])]
        nodes += [(s["worker_id"], s["computed_resource_claim"]) for s in row.get("subordinates", ())]
        for worker_id, claim in nodes:
            for index, amount in claim["vram"].items():
                key = (worker_id, row["gpu_type"], int(index))
                held[key] = held.get(key, 0) + amount
    return held


def _rows(
    workers: Sequence[dict[str, Any]], claims: Mapping[GpuKey, int], outside: Mapping[GpuKey, int]
) -> list:
    """Worker rows whose ``memory.used`` reports other processes plus the running instances."""
    rows = []
    for worker in workers:
        gpus = []
        for gpu in worker["status"]["gpu_devices"]:
            key = (worker["id"], gpu["type"], gpu["index"])
            used = outside[key] + claims.get(key, 0)
            gpus.append({**gpu, "memory": {**gpu["memory"], "used": min(used, gpu["memory"]["total"])}})
        rows.append({**worker, "status": {**worker["status"], "gpu_devices": gpus}})
    return rows


def _instance(number: int, model: dict[str, Any], chosen: Any) -> dict[str, Any]:
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
    keys = [(chosen.worker_id, chosen.gpu_type, i) for i in chosen.gpu_indexes]
    for sub in chosen.subordinate_workers or ():
        keys += [(sub.worker_id, chosen.gpu_type, i) for i in sub.gpu_indexes]
    return keys


def startup(
    model: dict[str, Any], argv: Sequence[str], pre: Sequence[tuple[int, int, str]]
) -> tuple[bool, int | None]:
    """(predicted to fail at start-up, predicted KV tokens) for a placement.

    ``pre`` holds (total, free at start, platform) of every chosen GPU.
    """
    weights = model["weight_bytes"]
    least = min(free for _, free, _ in pre)
    if model.get("hf_config") is None:  # diffusion: a full copy per GPU
        return weights + OVERHEAD > least, None
    params = BackendParameters(list(argv))
    flags = RuntimeFlags.from_parameters(params)
    tp = params.find_int(["tp-size"]) or 1
    pp = params.find_int(["pp-size"]) or 1
    config = model["hf_config"]
    kv = kv_shape(config, flags.kv_cache_dtype, config.get("torch_dtype", "bfloat16"))
    context = config.get("max_position_embeddings", 2048)
    traits = ModelTraits(
        kv is not None and kv.is_mla, "vision_config" in config, config.get("vision_config"), context,
        kv_heads=kv.kv_heads if kv is not None else 0,
    )
    device = Device(min(total for total, _, _ in pre) / MIB, pre[0][2])
    fraction = sizing(device, traits, flags, tp, pp).fraction
    reserve = reserve_mib(device, traits, flags, tp, pp, floor=False) * MIB
    rank = -(-weights // (tp * pp))
    cell = kv.cell_bytes(tp // flags.dp_size if flags.enable_dp_attention else tp, pp) if kv else 1
    one_context = min(context, CONTEXT_CAP) * cell if kv else 0
    need = rank + OVERHEAD + one_context
    fails = fraction * least < need or any(free < need + reserve for _, free, _ in pre)
    tokens = kv_tokens(fraction * least - rank - OVERHEAD, cell, 1) if kv else None
    return fails, tokens


def _median_need(deployments: Sequence[Deployment]) -> float:
    needs = []
    for deployment in deployments:
        params = BackendParameters(deployment.model["backend_parameters"])
        ranks = (params.find_int(["tp-size"]) or 1) * (params.find_int(["pp-size"]) or 1)
        needs.append(deployment.model["weight_bytes"] / ranks + 2 * GIB)
    return statistics.median(needs)


def _measure(
    run: Run, gpus: Mapping[GpuKey, tuple[int, int, str]], claims: Mapping[GpuKey, int], need: float
) -> None:
    total = sum(t for t, _, _ in gpus.values())
    run.utilisation.append(sum(claims.values()) / total)
    frees = [max(t - o - claims.get(k, 0), 0) for k, (t, o, _) in gpus.items()]
    free = sum(frees)
    run.fragmentation.append(sum(f for f in frees if f < need) / free if free else 0.0)


def replay(seed: int, label: str, arrivals: int) -> Run:
    """One policy over one seed's trace."""
    policy, sharing = RUNS[label]
    workers = cluster(seed)
    deployments = trace(seed, arrivals)
    gpus = _gpus(workers)
    outside = {key: used for key, (_, used, _) in gpus.items()}
    need = _median_need(deployments)
    run = Run(label)
    running: list[tuple[int, dict[str, Any]]] = []  # (leaves at, instance row)
    for step, deployment in enumerate(deployments):
        running = [(leaves, row) for leaves, row in running if leaves > step]
        instances = [row for _, row in running]
        claims = _claims(instances)
        request = {
            "request_id": f"{label}-{step}",
            "policy": policy,
            "model": deployment.model,
            "workers": _rows(workers, claims, outside),
            "model_instances": instances,
        }
        if sharing:
            request["gpu_sharing"] = True
        started = time.process_time()
        result = schedule(request)
        run.times.append(time.process_time() - started)
        if result.status != "scheduled" or result.selected is None:
            run.refused += 1
            if run.before_refusal is None:
                run.before_refusal = run.placed
        else:
            chosen = result.candidates[result.selected]
            pre = [
                (gpus[k][0], gpus[k][0] - outside[k] - claims.get(k, 0), gpus[k][2])
                for k in _chosen_gpus(chosen)
            ]
            launch = result.launch
            argv = launch.backend_parameters if launch else []
            fails, tokens = startup(deployment.model, argv, pre)
            run.failures += fails
            if tokens is not None:
                run.kv.append(tokens)
            run.placed += 1
            running.append((step + deployment.lifetime, _instance(step + 1, deployment.model, chosen)))
        _measure(run, gpus, _claims(row for _, row in running), need)
    if run.before_refusal is None:
        run.before_refusal = run.placed
    return run


def _row(seed: int, run: Run) -> str:
    kv = int(statistics.median(run.kv)) if run.kv else 0
    return (
        f"| {seed} | {run.label} | {run.before_refusal} | {run.placed} | {run.refused} | {run.failures} "
        f"| {100 * statistics.mean(run.utilisation):.1f} % "
        f"| {100 * statistics.mean(run.fragmentation):.1f} % "
        f"| {kv:,} | {1000 * statistics.median(run.times):.2f} ms |"
    )


def _plot(path: Path, seed: int, runs: Sequence[Run]) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]'): no plot"
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for run in runs:
        axes[0][0].plot([100 * u for u in run.utilisation], label=run.label)
        axes[0][1].plot([100 * f for f in run.fragmentation], label=run.label)
    axes[0][0].set(title="GPU memory claimed (%)", xlabel="arrival")
    axes[0][1].set(title="free memory unusable by the median request (%)", xlabel="arrival")
    labels = [run.label for run in runs]
    axes[1][0].bar(labels, [run.before_refusal or 0 for run in runs], label="before first refusal")
    axes[1][0].bar(labels, [run.failures for run in runs], label="predicted to fail at start-up")
    axes[1][0].set(title="placements")
    axes[1][1].hist([[t / 1000 for t in run.kv] for run in runs], bins=30, label=labels, log=True)
    axes[1][1].set(title="predicted KV tokens per placement (thousands)")
    for ax in (axes[0][0], axes[0][1], axes[1][0], axes[1][1]):
        ax.legend()
    fig.suptitle(f"gpustack vs precise, seed {seed}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return f"plot: {path}"


def main(argv: Sequence[str] | None = None) -> None:
    """Replay every seed under every policy and print the table (and write the plot)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(DEFAULT_SEEDS))
    parser.add_argument("--arrivals", type=int, default=DEFAULT_ARRIVALS)
    parser.add_argument("--plot", type=Path, default=Path("docs/img/policies.png"))
    args = parser.parse_args(argv)
    print(
        "| seed | policy | placed before 1st refusal | placed | refused | predicted start-up failures "
        "| mean claimed | mean fragmentation | median KV tokens | median decision |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for position, seed in enumerate(args.seeds):
        runs = [replay(seed, label, args.arrivals) for label in RUNS]
        for run in runs:
            print(_row(seed, run), flush=True)
        base = runs[0].before_refusal or 1
        gains = ", ".join(
            f"{run.label} {100 * ((run.before_refusal or 0) / base - 1):+.0f} %" for run in runs[1:]
        )
        times = ", ".join(
            f"{run.label} {statistics.median(run.times) / statistics.median(runs[0].times):.2f}×"
            for run in runs[1:]
        )
        print(
            f"|   | seed {seed} vs gpustack: before first refusal {gains}; decision time {times} |",
            flush=True,
        )
        if position == 0:
            print(_plot(args.plot, seed, runs), file=sys.stderr)


if __name__ == "__main__":
    main()
