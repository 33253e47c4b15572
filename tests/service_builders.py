"""Requests, clusters and small steps for the service tests on fakeredis (``tests/tasks/``).

The model's claim is fixed (``SMALL``) so the scenarios are about capacity,
not estimates.
"""

from __future__ import annotations

from typing import Any

from builders import GIB, H100, RTX_4090, instance, model, uniform_worker

from tasks.base.step import Step
from tasks.decision.decide import decide
from tasks.testing import Harness

#: A 7B model's claim on one GPU of any size (keeps the scenarios about capacity, not estimates).
SMALL = {"GPUSTACK_MODEL_VRAM_CLAIM": str(10 * GIB)}


def small_request(rid: str, **model_fields: Any) -> dict[str, Any]:
    """A request for a model claiming :data:`SMALL` (``model_fields`` override the model)."""
    return {"request_id": rid, "model": model(**{"env": SMALL, **model_fields})}


def uniform_cluster(workers: int = 2, gpus: int = 2) -> dict[str, Any]:
    """A snapshot of ``workers`` RTX 4090 hosts with ``gpus`` GPUs each, and no instance."""
    return {
        "workers": [uniform_worker(w, f"w{w}", gpus, RTX_4090) for w in range(1, workers + 1)],
        "model_instances": [],
    }


def cluster_of(*workers: dict[str, Any]) -> dict[str, Any]:
    """A snapshot of the given worker rows, and no instance."""
    return {"workers": list(workers), "model_instances": []}


def worker_row(wid: int, name: str, count: int = 1, total: int = RTX_4090, **kw: Any) -> dict[str, Any]:
    """A worker row with ``count`` GPUs of ``total`` bytes (one RTX 4090 by default)."""
    return uniform_worker(wid, name, count, total, **kw)


def statuses(h: Harness) -> list[tuple[str, str]]:
    """(request id, status) of every entry of the results stream."""
    return [(r["request_id"], r["status"]) for r in h.results()]


def submit_and_decide(h: Harness, request_id: str) -> Step | None:
    """Submit a small request and run the decide stage of its queued message (task id "t")."""
    h.submit(small_request(request_id))
    item = h.queue.popleft()
    return decide(h.rt, item.request_id, item.seq, item.attempt, "t")


def two_workers_with_a_booking(**settings: Any) -> Harness:
    """Workers a and b (label gpu=x) and a spare c; request "r" (selector gpu=x) booked on a or b.

    Rescheduling hysteresis: 60 s grace, 30 s ready-stable (``settings`` override).
    """
    h = Harness(
        settings=Harness().settings.model_copy(
            update={"unreachable_grace_s": 60, "ready_stable_s": 30, **settings}
        )
    )
    h.apply(
        cluster_of(
            worker_row(1, "a", labels={"gpu": "x"}),
            worker_row(2, "b", labels={"gpu": "x"}),
            worker_row(3, "c", labels={"gpu": "spare"}),
        )
    )
    h.submit(small_request("r", worker_selector={"gpu": "x"}))
    h.pump()
    return h


def booked_worker(h: Harness, rid: str) -> int:
    """The main worker of the instance booked for ``rid``."""
    meta = h.rt.cluster.instance_meta()[f"req:{rid}"]
    return meta.workers[0]


def assert_rescheduled_after_grace(h: Harness) -> None:
    """Not rescheduled 59 s into the 60 s grace; rescheduled and placed as r~1 just after it."""
    h.clock.advance(59)
    h.drain()
    assert h.events(["sched.instance.rescheduled"]) == []
    h.clock.advance(2)
    h.drain()
    h.pump()
    assert statuses(h)[-1] == ("r~1", "scheduled")


def two_node_snapshot() -> dict[str, Any]:
    """Two workers (2 × H100 with 1 GiB reserved, 1 × 4090): a 30 GiB instance on worker 1's GPU 0
    and a two-node instance holding 10 GiB of worker 1's GPU 1 and 5 GiB of worker 2's GPU 0."""
    return {
        "workers": [
            uniform_worker(1, "a", 2, H100, reserved_vram=GIB),
            uniform_worker(2, "b", 1, RTX_4090),
        ],
        "model_instances": [
            instance(10, 1, {0: 30 * GIB}),
            instance(
                11,
                1,
                {1: 10 * GIB},
                subordinates=[
                    {
                        "worker_id": 2,
                        "gpu_type": "cuda",
                        "gpu_indexes": [0],
                        "computed_resource_claim": {"vram": {"0": 5 * GIB}},
                    },
                ],
            ),
        ],
    }
