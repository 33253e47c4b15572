"""Time ``scheduler_core.schedule()`` on synthetic clusters and print a table of medians.

Clusters: 10, 200 and 2000 workers × 8 GPUs of mixed types (H100, A100-80G,
RTX 4090 on CUDA; MI300X on ROCm), with 0 or 2 × workers running instances.
Models: one that needs 1 GPU, one that needs 8 GPUs (tp 8), one that needs
several workers. "decide" times a pre-validated request; "parse+decide"
includes pydantic validation of the JSON dict; "warm memo" is what the
service's long-lived decider sees: the same validated worker rows, one new
instance booked between decisions, and one ``SnapshotMemo`` kept across them.

Targets (issue 2): 200×8 with 400 instances ≤ 10 ms; 2000×8 with 4000
instances ≤ 100 ms; time grows no faster than linearly with W×G + I.

Usage: python bench/bench_schedule.py [--repeat N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

from scheduler_core import ModelInstance, ScheduleRequest, SnapshotMemo, schedule

GIB = 1 << 30
#: (type, vendor, total bytes, name) of the GPU flavours in the synthetic fleet.
FLAVOURS = (
    ("cuda", "nvidia", 85_899_345_920, "NVIDIA H100 80GB HBM3"),
    ("cuda", "nvidia", 85_899_345_920, "NVIDIA A100-SXM4-80GB"),
    ("cuda", "nvidia", 26_015_170_560, "NVIDIA GeForce RTX 4090"),
    ("rocm", "amd", 206_141_652_992, "AMD Instinct MI300X"),
)

MODELS: dict[str, dict[str, Any]] = {
    "1 GPU (7B)": {"weight_bytes": 15 * GIB, "heads": 28, "params": []},
    "8 GPUs (70B tp8)": {"weight_bytes": 140 * GIB, "heads": 64, "params": ["--tp-size", "8"]},
    "multi-worker (671B)": {"weight_bytes": 1500 * GIB, "heads": 128, "params": []},
}


def cluster(workers: int, instances: int, seed: int = 7) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A deterministic synthetic fleet: each worker has 8 GPUs of one flavour."""
    rng = random.Random(seed)
    rows = []
    for worker_id in range(1, workers + 1):
        gpu_type, vendor, total, name = FLAVOURS[worker_id % len(FLAVOURS)]
        rows.append(
            {
                "id": worker_id,
                "name": f"node-{worker_id:05d}",
                "ip": f"10.{worker_id // 250}.{worker_id % 250}.1",
                "state": "ready",
                "labels": {"rack": f"r{worker_id % 16}"},
                "system_reserved": {"ram": 0, "vram": GIB},
                "status": {
                    "memory": {"total": 1024 * GIB},
                    "gpu_devices": [
                        {
                            "type": gpu_type,
                            "vendor": vendor,
                            "name": name,
                            "index": i,
                            "memory": {"total": total},
                        }
                        for i in range(8)
                    ],
                },
            }
        )
    placed = []
    for instance_id in range(1, instances + 1):
        worker_id = rng.randint(1, workers)
        gpu_type, _, total, _ = FLAVOURS[worker_id % len(FLAVOURS)]
        indexes = rng.sample(range(8), rng.choice((1, 1, 2, 4)))
        placed.append(
            {
                "id": instance_id,
                "name": f"inst-{instance_id}",
                "model_id": 1000 + instance_id % 50,
                "worker_id": worker_id,
                "gpu_type": gpu_type,
                "gpu_indexes": sorted(indexes),
                "computed_resource_claim": {"vram": {str(i): int(total * 0.45) for i in indexes}},
            }
        )
    return rows, placed


def request(
    model_name: str, workers: list[dict[str, Any]], instances: list[dict[str, Any]]
) -> dict[str, Any]:
    spec = MODELS[model_name]
    return {
        "request_id": "bench",
        "model": {
            "id": 1,
            "name": "bench",
            "backend": "SGLang",
            "categories": ["llm"],
            "backend_parameters": spec["params"],
            "weight_bytes": spec["weight_bytes"],
            "hf_config": {"num_attention_heads": spec["heads"], "vocab_size": 128256},
        },
        "workers": workers,
        "model_instances": instances,
    }


def median_ms(func: Any, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def warm_median_ms(parsed: ScheduleRequest, repeat: int) -> float:
    """Median decision time with a kept memo while one instance is booked per decision."""
    memo = SnapshotMemo()
    workers = parsed.workers or []
    placed = list(parsed.model_instances or [])
    schedule(parsed, memo=memo)  # the first decision fills the memo
    samples = []
    for number in range(repeat):
        host = workers[(number * 7919) % len(workers)]
        gpu = ((host.status or {}).get("gpu_devices") or [None])[0]
        placed.append(
            ModelInstance.model_validate(
                {
                    "id": 900_000 + number, "name": f"booked-{number}", "model_id": 2,
                    "worker_id": host.id, "gpu_type": gpu.get("type") if gpu else None,
                    "gpu_indexes": [0], "computed_resource_claim": {"vram": {"0": GIB}},
                }
            )
        )
        request = parsed.model_copy(update={"model_instances": list(placed)})
        start = time.perf_counter()
        schedule(request, memo=memo)
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="runs per cell (median is reported)")
    args = parser.parse_args()
    header = (
        "cluster", "instances", "model", "status", "decide ms", "parse+decide ms", "ns per (W·G+I)",
        "warm memo ms",
    )
    widths = (16, 9, 20, 13, 10, 16, 15, 13)
    print(" ".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True)))
    per_unit: dict[str, list[float]] = {}
    for workers in (10, 200, 2000):
        for factor in (0, 2):
            rows, placed = cluster(workers, factor * workers)
            for model_name in MODELS:
                raw = request(model_name, rows, placed)
                parsed = ScheduleRequest.model_validate(raw)
                status = schedule(parsed).status
                repeat = max(3, args.repeat if workers < 2000 else args.repeat // 3)
                decide = median_ms(lambda parsed=parsed: schedule(parsed), repeat)
                full = median_ms(lambda raw=raw: schedule(raw), max(3, repeat // 2))
                warm = warm_median_ms(parsed, max(5, repeat))
                units = workers * 8 + len(placed)
                per_unit.setdefault(model_name, []).append(decide * 1e6 / units)
                cells = (f"{workers} × 8 GPU", len(placed), model_name, status)
                row = " ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=False))
                print(f"{row} {decide:>10.2f} {full:>16.2f} {decide * 1e6 / units:>15.0f} {warm:>13.2f}")
    print()
    for model_name, values in per_unit.items():
        ratio = values[-1] / values[0]
        print(f"linearity {model_name}: ns per (W·G+I), largest / smallest cluster = {ratio:.2f}")


if __name__ == "__main__":
    main()
