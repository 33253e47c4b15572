"""The claims ledger's arithmetic: it agrees with the core's allocatable memory exactly."""

from __future__ import annotations

import pytest
from builders import GIB, H100, RTX_4090, gpu, instance, uniform_worker, worker
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_core import ModelInstance, Worker
from scheduler_core.cluster import ClusterState
from scheduler_core.workers import worker_view
from tasks.intake.snapshots import SnapshotRows, parse_snapshot
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
    amounts = {"1:cuda:0": 71_640_054_497, "12:rocm:3": 0, "2:x:0": 2**63 - 1}
    assert encode_amounts(amounts) == (
        '[["12:rocm:3","0"],["1:cuda:0","71640054497"],["2:x:0","9223372036854775807"]]'
    )
    assert decode_amounts(encode_amounts(amounts)) == amounts
    assert decode_amounts("") == {}
    assert gpu_key(3, None, 1) == "3::1"


#: Characters a separator-joined list would split on, and JSON's own.
_hostile_text = st.text(alphabet=st.sampled_from([*';=:,[]"\\ \n{}é€', "a", "0"]), max_size=12)


@given(st.dictionaries(_hostile_text, st.integers(0, 2**63 - 1), max_size=6))
def test_any_key_round_trips_as_one_entry(amounts: dict[str, int]) -> None:
    assert decode_amounts(encode_amounts(amounts)) == amounts


def test_a_malformed_list_is_refused() -> None:
    for text in ('{"a": "1"}', '[["a", 1]]', '[["a", "-1"]]', '[["a", "²"]]', "a=1;b=2"):
        with pytest.raises(ValueError):
            decode_amounts(text)
    with pytest.raises(ValueError, match="negative"):
        encode_amounts({"a": -1})


@settings(max_examples=40, deadline=None)
@given(st.lists(_hostile_text, min_size=2, max_size=4, unique=True))
def test_gpu_types_never_cross_into_another_workers_entries(types: list[str]) -> None:
    """Workers whose GPU types hold separators keep exactly their own ledger entries, also once one leaves.

    The rows go to the state layer directly: the door refuses such types, the
    ledger's encoding must hold without it.
    """
    h = Harness()
    workers = [worker(w, f"w{w}", [gpu(0, (w + 1) * GIB, type_=t)]) for w, t in enumerate(types, start=1)]
    rows = SnapshotRows(tuple(Worker.model_validate(row) for row in workers), ())
    h.rt.cluster.apply_snapshot(rows)
    expected = {gpu_key(w, t, 0): (w + 1) * GIB for w, t in enumerate(types, start=1)}
    assert h.rt.cluster.ledger()[0] == expected
    h.rt.cluster.remove_worker(1, "test")
    del expected[gpu_key(1, types[0], 0)]
    assert h.rt.cluster.ledger()[0] == expected
    row = Worker.model_validate(workers[1])
    h.rt.cluster.upsert_worker(row, h.rt.cluster.worker_row(2), {})
    assert h.rt.cluster.ledger()[0] == expected


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
