"""The claims ledger and the cluster scripts on fakeredis.

The ledger must agree with the core's allocatable memory exactly (otherwise
the reservation re-check would admit what the core refuses, or refuse what it
admits) and must never book past capacity.
"""

from __future__ import annotations

import json

import pytest
from builders import GIB, H100, RTX_4090, gpu, instance, uniform_worker, worker
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_core import ModelInstance, Worker
from scheduler_core.cluster import ClusterState, worker_view
from tasks.intake.snapshots import parse_snapshot
from tasks.state.cluster_store import Booking, snapshot_document
from tasks.state.ledger import (
    decode_amounts,
    encode_amounts,
    gpu_key,
    instance_claims,
    occupied_workers,
    overbooked,
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


def test_apply_snapshot_rebuilds_the_ledger_and_stores_the_snapshot_once() -> None:
    h = Harness()
    first = h.rt.cluster.apply_snapshot(_snapshot())
    again = h.rt.cluster.apply_snapshot(_snapshot())
    assert (first.version, again.version) == (1, 2) and first.digest == again.digest
    capacity, booked = h.rt.cluster.ledger()
    assert capacity == {"1:cuda:0": H100 - GIB, "1:cuda:1": H100 - GIB, "2:cuda:0": RTX_4090}
    assert booked == {"1:cuda:0": 30 * GIB, "1:cuda:1": 10 * GIB, "2:cuda:0": 5 * GIB}
    assert len(h.rt.client.keys(h.rt.keys.snapshot("*"))) == 1
    events = h.events(["sched.cluster.applied"])
    assert [e.cluster_version for e in events] == [1, 2]
    assert events[0].data["digest"] == first.digest
    assert isinstance(events[0].data["workers"], int)  # a count, never the rows


def test_snapshot_digest_is_over_normalised_rows() -> None:
    raw = _snapshot()
    raw["workers"][0]["heartbeat_time"] = "ignored"  # type: ignore[index]
    legacy = dict(raw["workers"][1])  # type: ignore[index]
    legacy["system_reserved"] = {"memory": 0, "gpu_memory": 0}
    raw["workers"][1] = legacy  # type: ignore[index]
    assert snapshot_document(parse_snapshot(raw))[1] == snapshot_document(parse_snapshot(_snapshot()))[1]


def test_invalid_snapshot_changes_nothing() -> None:
    h = Harness()
    bad = _snapshot()
    bad["workers"][0]["state"] = "sleepy"  # type: ignore[index]
    with pytest.raises(ValueError):
        h.rt.cluster.apply_snapshot(bad)
    assert h.rt.cluster.version() == 0


def _book(h: Harness, rid: str, claims: dict[str, int], workers: list[int]) -> str:
    h.rt.records.accept(rid, json.dumps({"request_id": rid}), "d")
    h.rt.partition.call(h.rt.records.begin_call(rid, 0, 0, "t"))
    h.rt.partition.call(h.rt.records.record_decision_call(rid, 0, 0, 0, "{}", "d", "{}"))
    key = f"req:{rid}"
    row = {
        "name": key,
        "worker_id": workers[0],
        "gpu_type": "cuda",
        "gpu_indexes": [0],
        "computed_resource_claim": {"vram": {"0": 1}},
    }
    meta = {"src": "gpusched", "rid": rid, "pin": False, "w": workers}
    data = {"instance_key": key, "row": row, "meta": meta}
    booking = Booking(key, json.dumps(row), json.dumps(meta), encode_amounts(claims), json.dumps(data))
    call = h.rt.cluster.reserve_call(rid, 0, 0, booking, 0, "{}", result_digest="d")
    return h.rt.partition.call(call).status


def test_snapshot_keeps_live_bookings_and_drops_those_on_vanished_workers() -> None:
    h = Harness()
    h.rt.cluster.apply_snapshot(_snapshot())
    assert _book(h, "keep", {"2:cuda:0": GIB}, [2]) == "booked"
    assert _book(h, "lose", {"1:cuda:0": GIB}, [1]) == "booked"
    smaller = {"workers": [_snapshot()["workers"][1]], "model_instances": []}  # type: ignore[index]
    applied = h.rt.cluster.apply_snapshot(smaller)
    assert [item.key for item in applied.dropped] == ["req:lose"]
    assert applied.dropped[0].meta.request_id == "lose"
    assert set(h.rt.client.hkeys(h.rt.keys.instances)) == {"req:keep"}
    assert h.rt.cluster.ledger()[1] == {"2:cuda:0": GIB}


def test_worker_upsert_is_compare_and_set_and_reports_overbooking() -> None:
    h = Harness()
    h.rt.cluster.apply_snapshot(_snapshot())
    current = h.rt.cluster.worker_row(1)
    shrunk = Worker.model_validate(uniform_worker(1, "a", 2, 20 * GIB, reserved_vram=GIB))
    assert h.rt.cluster.upsert_worker(shrunk, "stale-row", {}).status == "stale"
    change = h.rt.cluster.upsert_worker(shrunk, current, {"kind": "worker_updated"})
    assert change.status == "ok" and change.overbooked == 1
    assert h.rt.cluster.ledger()[0]["1:cuda:0"] == 19 * GIB
    over = h.events(["sched.ledger.overbooked"])[0].data
    assert over["gpus"][0]["gpu"] == "1:cuda:0"
    new = Worker.model_validate(uniform_worker(3, "c", 1, H100))
    assert h.rt.cluster.upsert_worker(new, "", {}).status == "ok"
    assert h.rt.cluster.upsert_worker(new, "", {}).status == "stale"  # "" means: must be new


def test_worker_removal_releases_everything_it_held_and_is_idempotent() -> None:
    h = Harness()
    h.rt.cluster.apply_snapshot(_snapshot())
    version, released = h.rt.cluster.remove_worker(2, "test")
    assert version == 2 and [item.key for item in released] == ["id:11"]
    capacity, booked = h.rt.cluster.ledger()
    assert "2:cuda:0" not in capacity and booked == {"1:cuda:0": 30 * GIB}
    assert h.rt.cluster.remove_worker(2, "test") == (None, ())
    assert h.rt.cluster.version() == 2


def test_release_is_idempotent() -> None:
    h = Harness()
    h.rt.cluster.apply_snapshot(_snapshot())
    version, released = h.rt.cluster.release(["id:10", "nope"], "instance_deleted")
    assert version == 2 and [item.key for item in released] == ["id:10"]
    assert h.rt.cluster.release(["id:10"], "instance_deleted") == (None, ())
    assert h.rt.cluster.version() == 2
    assert "1:cuda:0" not in h.rt.cluster.ledger()[1]


# ------------------------------------------------------------------ properties
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


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 60)), min_size=1, max_size=25))
def test_reservations_never_book_past_capacity(bookings: list[tuple[int, int]]) -> None:
    h = Harness()
    h.rt.client.hset(h.rt.keys.capacity, mapping={f"1:cuda:{i}": 100 for i in range(3)})
    for n, (first, amount) in enumerate(bookings):
        claims = {f"1:cuda:{first}": amount, f"1:cuda:{(first + 1) % 3}": amount // 2}
        _book(h, f"r{n}", claims, [1])
        capacity, booked = h.rt.cluster.ledger()
        assert overbooked(capacity, booked) == {}
    claims_total: dict[str, int] = {}
    for held in h.rt.cluster.claims().values():
        for key, amount in held.items():
            claims_total[key] = claims_total.get(key, 0) + amount
    assert {k: v for k, v in claims_total.items() if v} == h.rt.cluster.ledger()[1]
