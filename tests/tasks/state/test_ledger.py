"""The claims ledger's arithmetic: it agrees with the core's allocatable memory exactly."""

from __future__ import annotations

from builders import GIB, H100, RTX_4090, gpu, instance, uniform_worker, worker
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_core import ModelInstance, Worker
from scheduler_core.cluster import ClusterState
from scheduler_core.workers import worker_view
from tasks.intake.snapshots import parse_snapshot
from tasks.state.ledger import (
    decode_amounts,
    encode_amounts,
    gpu_key,
    instance_claims,
    occupied_workers,
    worker_capacity,
)
from tasks.testing import Harness


def _snapshot() -> dict[str, object]:
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


def test_capacity_is_total_minus_reserved_per_gpu() -> None:
    row = Worker.model_validate(uniform_worker(1, "a", 2, H100, reserved_vram=GIB))
    assert worker_capacity(row) == {"1:cuda:0": H100 - GIB, "1:cuda:1": H100 - GIB}


def test_gpus_without_memory_or_index_are_not_bookable() -> None:
    row = Worker.model_validate(worker(1, "a", [gpu(0, 0), {"type": "cuda", "memory": {"total": 5}}]))
    assert worker_capacity(row) == {}


def test_claims_follow_the_core_rules_for_leaders_and_subordinates() -> None:
    rows = _snapshot()["model_instances"]
    inst = ModelInstance.model_validate(rows[1])  # type: ignore[index]
    assert instance_claims(inst, {}) == {"1:cuda:1": 10 * GIB, "2:cuda:0": 5 * GIB}
    assert occupied_workers(inst) == [1, 2]


def test_untyped_instances_count_against_every_type_and_not_their_subordinates() -> None:
    row = instance(
        1,
        1,
        {0: 7},
        gpu_type=None,
        subordinates=[{"worker_id": 2, "gpu_indexes": [0], "computed_resource_claim": {"vram": {"0": 3}}}],
    )
    claims = instance_claims(ModelInstance.model_validate(row), {1: ("cuda", "rocm")})
    assert claims == {"1:cuda:0": 7, "1:rocm:0": 7}


def test_amounts_round_trip() -> None:
    amounts = {"1:cuda:0": 71_640_054_497, "12:rocm:3": 0}
    assert decode_amounts(encode_amounts(amounts)) == amounts
    assert gpu_key(3, None, 1) == "3::1"


_claims = st.dictionaries(st.integers(0, 3), st.integers(0, 40 * GIB), min_size=1, max_size=4)


@st.composite
def _clusters(draw: st.DrawFn) -> dict[str, object]:
    count = draw(st.integers(1, 4))
    workers = [
        uniform_worker(
            w,
            f"w{w}",
            draw(st.integers(1, 4)),
            draw(st.sampled_from([RTX_4090, H100])),
            reserved_vram=draw(st.sampled_from([0, GIB])),
        )
        for w in range(1, count + 1)
    ]
    instances = [
        instance(
            i, draw(st.integers(1, count)), draw(_claims), gpu_type=draw(st.sampled_from(["cuda", None]))
        )
        for i in range(draw(st.integers(0, 6)))
    ]
    return {"workers": workers, "model_instances": instances}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_clusters())
def test_ledger_free_memory_equals_the_core_allocatable(document: dict[str, object]) -> None:
    h = Harness()
    h.rt.cluster.apply_snapshot(document)
    capacity, booked = h.rt.cluster.ledger()
    rows = parse_snapshot(document)
    views = [worker_view(w) for w in rows.workers]
    state = ClusterState(views, [i for _, i in rows.instances])
    for view in views:
        allocatable = state.allocatable(view, "cuda").vram
        for index, free in allocatable.items():
            key = gpu_key(view.id, "cuda", index)
            assert max(capacity[key] - booked.get(key, 0), 0) == free
