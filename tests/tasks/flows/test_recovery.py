"""Recovering a partition whose data Redis lost: the snapshot, gpusched's bookings, a new generation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from builders import GIB
from service_builders import small_request, uniform_cluster

from tasks.flows.recovery import export_state, recover
from tasks.intake.snapshots import InvalidField
from tasks.testing import Harness, booking_violations


def _placed(h: Harness, *ids: str) -> dict[str, Any]:
    h.apply(uniform_cluster(2, 2))
    for rid in ids:
        h.submit(small_request(rid))
    h.pump()
    assert {rid: h.record(rid)["status"] for rid in ids} == dict.fromkeys(ids, "scheduled")
    return export_state(h.rt)


def test_the_export_lists_workers_control_plane_instances_and_bookings(h: Harness) -> None:
    backup = _placed(h, "a", "b")
    assert [w["id"] for w in backup["workers"]] == [1, 2]
    assert backup["model_instances"] == []
    bookings = [(b["request_id"], b["request"]["request_id"]) for b in backup["bookings"]]
    assert bookings == [("a", "a"), ("b", "b")]
    assert all(b["result"]["status"] == "scheduled" for b in backup["bookings"])
    assert backup["exported"]["generation"] == h.rt.generation.remembered


def test_a_wiped_redis_recovers_its_bookings_and_resumes(h: Harness) -> None:
    backup = _placed(h, "a", "b")
    capacity, booked = h.rt.cluster.ledger()
    h.rt.client.flushall()
    assert h.rt.generation.check().verdict == "wiped"
    summary = recover(h.rt, json.loads(json.dumps(backup)))
    assert (summary["status"], summary["bookings"], summary["workers"]) == ("recovered", 2, 2)
    assert h.rt.cluster.ledger() == (capacity, booked)  # the same GPUs are held again
    assert h.rt.client.get(h.rt.keys.data_lost) is None
    assert h.rt.generation.check().verdict == "ok"
    assert {h.record(rid)["state"] for rid in ("a", "b")} == {"done"}
    assert h.submit(small_request("a")).status == "duplicate"  # a resubmitted placement answers
    assert booking_violations(h.rt) == []
    (recovered,) = h.events(["sched.data.recovered"])
    assert recovered.data["bookings"] == 2


def test_a_rolled_back_redis_drops_stale_bookings_without_moving_them(h: Harness) -> None:
    backup = _placed(h, "a", "b")
    backup["bookings"] = [b for b in backup["bookings"] if b["request_id"] == "a"]  # b was released since
    summary = recover(h.rt, backup)
    assert summary["bookings"] == 1 and summary["rescheduled"] == []
    assert [meta.request_id for meta in h.rt.cluster.instance_meta().values()] == ["a"]
    assert h.rt.client.ttl(h.rt.keys.request("b")) > 0  # the stale record expires like a released one
    ledger = h.rt.cluster.ledger()
    recover(h.rt, backup)  # run again (e.g. after a failure half-way): the same state
    assert [m.request_id for m in h.rt.cluster.instance_meta().values()] == ["a"]
    assert h.rt.cluster.ledger() == ledger and booking_violations(h.rt) == []


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda b: b.update(bookings={"a": 1}), "bookings"),
        (lambda b: b["bookings"][0].pop("instance"), "bookings.0.instance"),
        (lambda b: b["bookings"][0].update(request_id="zzz"), "bookings.0.request_id"),
        (lambda b: b["bookings"][0]["instance"].update(worker_id=9), "bookings.0.instance.worker_id"),
        (lambda b: b["bookings"][0]["request"]["model"].update(replicas=-1),
         "bookings.0.request.model.replicas"),
        (lambda b: b["bookings"].append(b["bookings"][0]), "bookings.2.request_id"),
    ],
)
def test_an_invalid_booking_is_refused_naming_it_and_nothing_changes(
    h: Harness, mutate: Any, field: str
) -> None:
    backup = _placed(h, "a", "b")
    version = h.rt.cluster.version()
    mutate(backup)
    with pytest.raises(InvalidField) as refused:
        recover(h.rt, backup)
    assert refused.value.field == field
    assert h.rt.cluster.version() == version and h.rt.client.get(h.rt.keys.data_lost) is None


def test_a_recovery_onto_smaller_gpus_reports_what_it_overbooks(h: Harness) -> None:
    """``restore_booking.lua`` re-books what the backup held and reports each GPU now over its capacity."""
    backup = _placed(h, "a")
    for worker in backup["workers"]:
        for gpu in worker["status"]["gpu_devices"]:
            gpu["memory"]["total"] = 4 * GIB
    summary = recover(h.rt, backup)
    capacity, booked = h.rt.cluster.ledger()
    expected = [{"gpu": key, "booked": held, "capacity": capacity[key]}
                for key, held in sorted(booked.items()) if held > capacity[key]]
    assert expected != [] and sorted(summary["overbooked"], key=lambda row: row["gpu"]) == expected
