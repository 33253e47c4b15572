"""CPU-time medians for the benches: one call timed, and the service's warm decider.

CPU time of this process (``time.process_time``), so other load on the shared
machine disturbs the figures less than wall time would. Each call runs inside
``scheduler_core.deciding()``, as the service's decider, the replay and the CLI
call the core (the cyclic garbage collector paused).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from fleet import GIB

from scheduler_core import Chain, ModelInstance, ScheduleRequest, SnapshotMemo, deciding, schedule


def median_cpu_ms(call: Any, repeat: int) -> float:
    """Median CPU time of ``call()`` over ``repeat`` runs, in ms."""
    samples = []
    for _ in range(repeat):
        start = time.process_time()
        with deciding():
            call()
        samples.append((time.process_time() - start) * 1000)
    return statistics.median(samples)


def warm_median_ms(parsed: ScheduleRequest, repeat: int, chain: Chain | None = None) -> float:
    """Median decision time of a long-lived decider: one ``SnapshotMemo`` kept, and one new
    one-GPU instance booked on another worker before each of ``repeat`` decisions."""
    memo = SnapshotMemo()
    workers = parsed.workers or []
    placed = list(parsed.model_instances or [])
    schedule(parsed, memo=memo, chain=chain)  # the first decision fills the memo
    samples = []
    for number in range(repeat):
        host = workers[(number * 7919) % len(workers)]
        booked = {
            "id": 900_000 + number, "name": f"booked-{number}", "model_id": 2, "worker_id": host.id,
            "gpu_type": host.gpus[0].type if host.gpus else None, "gpu_indexes": [0],
            "computed_resource_claim": {"vram": {"0": GIB}},
        }
        placed.append(ModelInstance.model_validate(booked))
        request = parsed.model_copy(update={"model_instances": list(placed)})
        start = time.process_time()
        with deciding():
            schedule(request, memo=memo, chain=chain)
        samples.append((time.process_time() - start) * 1000)
    return statistics.median(samples)
