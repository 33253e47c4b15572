"""Cluster mutations and bookings on fakeredis: snapshots, worker changes, releases, reservations."""

from __future__ import annotations

import json

import pytest
from builders import GIB, H100, RTX_4090, instance, uniform_worker
from hypothesis import given, settings
from hypothesis import strategies as st
from record_steps import booking, decided, event_types, reserve_booking, set_capacity

from scheduler_core import Worker
from tasks.intake.snapshots import parse_snapshot
from tasks.state.cluster_store import Booking, snapshot_document
from tasks.state.ledger import (
    encode_amounts,
    overbooked,
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


def test_reserve_books_every_gpu_or_none(h: Harness) -> None:
    set_capacity(h, **{"1_cuda_0": 100, "1_cuda_1": 100})
    h.rt.client.hset(h.rt.keys.booked, "1:cuda:1", 60)
    decided(h)
    conflict = reserve_booking(h, booking({"1:cuda:0": 50, "1:cuda:1": 50}), 999)
    assert conflict.status == "conflict" and conflict.next_attempt == 1
    assert h.rt.client.hgetall(h.rt.keys.booked) == {"1:cuda:1": "60"}  # nothing booked
    detail = json.loads(conflict.detail or "{}")
    assert detail["gpus"] == [{"gpu": "1:cuda:1", "booked": 60, "claim": 50, "capacity": 100}]
    assert h.record("r1")["state"] == "retrying"
    assert h.rt.client.zscore(h.rt.keys.outbox, "r1|0|1") == 999
    assert event_types(h)[-2:] == ["sched.reservation.conflicted", "sched.request.retried"]


def test_reserve_books_atomically_and_bumps_the_version_once(h: Harness) -> None:
    set_capacity(h, **{"1_cuda_0": 100, "2_cuda_0": 100})
    decided(h)
    booked = reserve_booking(h, booking({"1:cuda:0": 40, "2:cuda:0": 100}), 0)
    assert booked.status == "booked" and booked.version == 1
    assert h.rt.client.hgetall(h.rt.keys.booked) == {"1:cuda:0": "40", "2:cuda:0": "100"}
    assert h.rt.client.hget(h.rt.keys.claims, "req:r1") == '[["1:cuda:0","40"],["2:cuda:0","100"]]'
    meta = json.loads(h.rt.client.hget(h.rt.keys.instance_meta, "req:r1") or "{}")
    assert (meta["v"], meta["i"], meta["rid"]) == (1, 0, "r1")
    change = h.rt.client.xrange(h.rt.keys.changes)
    assert [(f["version"], f["type"]) for _, f in change] == [("1", "sched.reservation.booked")]
    again = reserve_booking(h, booking({"1:cuda:0": 40}), 0)
    assert again.status == "duplicate" and again.detail == "req:r1"
    assert h.rt.client.hget(h.rt.keys.booked, "1:cuda:0") == "40"


def test_reserve_on_a_vanished_gpu_conflicts(h: Harness) -> None:
    decided(h)
    outcome = reserve_booking(h, booking({"9:cuda:0": 1}), 0)
    assert outcome.status == "conflict"
    assert json.loads(outcome.detail or "{}")["gpus"][0]["capacity"] is None


def test_reserve_gives_up_after_the_attempt_budget(h: Harness) -> None:
    h = Harness(settings=h.settings.model_copy(update={"conflict_max_attempts": 1}))
    decided(h)
    outcome = reserve_booking(h, booking({"1:cuda:0": 1}), 0)
    assert outcome.status == "exhausted"
    assert h.rt.client.zcard(h.rt.keys.outbox) == 0  # no retry queued
