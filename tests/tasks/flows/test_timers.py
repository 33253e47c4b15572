"""Outage clocks and the rescheduling hysteresis: grace, flapping, pinned instances, suspension."""

from __future__ import annotations

from builders import GIB
from service_builders import (
    assert_rescheduled_after_grace,
    booked_worker,
    cluster_of,
    small_request,
    statuses,
    two_workers_with_a_booking,
    worker_row,
)

from scheduler_core import Worker
from tasks.flows.timers import read_health
from tasks.state.parking import ParkedEntry
from tasks.testing import Harness


def test_unreachable_beyond_grace_reschedules_but_a_short_outage_does_not() -> None:
    h = two_workers_with_a_booking()
    lost = booked_worker(h, "r")
    h.event({"kind": "worker_state", "worker_id": lost, "state": "unreachable"})
    h.clock.advance(30)
    h.drain()
    h.event({"kind": "worker_state", "worker_id": lost, "state": "ready"})
    h.clock.advance(31)  # ready for longer than ready_stable_s: the outage clock resets
    h.drain()
    assert h.rt.records.record("r")["state"] == "done" and len(h.results()) == 1
    h.event({"kind": "worker_state", "worker_id": lost, "state": "unreachable"})
    assert_rescheduled_after_grace(h)


def test_a_flapping_worker_accumulates_its_outage_instead_of_restarting_the_grace() -> None:
    h = two_workers_with_a_booking()
    lost = booked_worker(h, "r")
    for _ in range(2):  # down 15 s, up 5 s: never ready for ready_stable_s (30 s)
        h.event({"kind": "worker_state", "worker_id": lost, "state": "unreachable"})
        h.clock.advance(15)
        h.drain()
        h.event({"kind": "worker_state", "worker_id": lost, "state": "ready"})
        h.clock.advance(5)
        h.drain()
    assert h.events(["sched.instance.rescheduled"]) == []  # no move while it flaps within the grace
    h.event({"kind": "worker_state", "worker_id": lost, "state": "unreachable"})  # t = 40 s
    h.clock.advance(19)
    h.drain()
    assert h.events(["sched.instance.rescheduled"]) == []
    h.clock.advance(2)  # 61 s since the outage began (a restarted clock would wait until 100 s)
    h.drain()
    assert [e.data["from_request"] for e in h.events(["sched.instance.rescheduled"])] == ["r"]


def test_pinned_instances_wait_on_their_gpus() -> None:
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a"), worker_row(2, "b")))
    h.submit(small_request("pinned", gpu_selector={"gpu_ids": ["a:cuda:0"]}))
    h.pump()
    assert statuses(h) == [("pinned", "scheduled")]
    h.event({"kind": "worker_state", "worker_id": 1, "state": "unreachable"})
    h.clock.advance(120)
    h.drain()
    assert h.events(["sched.instance.rescheduled"]) == []
    assert "req:pinned" in h.rt.cluster.instance_meta()  # claims kept while it waits
    removed = h.event({"kind": "worker_removed", "worker_id": 1})
    assert removed["rescheduled"] == ["pinned~1"]
    h.pump()
    assert statuses(h)[-1] == ("pinned~1", "unschedulable")  # never moved to worker b
    reasons = ParkedEntry.model_validate_json(h.rt.parked.entries()["pinned~1"]).reasons
    assert reasons == ["gpu_selector_mismatch"]
    readded = h.event({"kind": "worker_added", "worker": worker_row(1, "a")})
    assert readded["woken"] == ["pinned~1"]
    h.pump()
    assert statuses(h)[-1] == ("pinned~1", "scheduled")


def test_rescheduling_is_suspended_when_most_workers_are_down() -> None:
    h = two_workers_with_a_booking(max_unreachable_fraction=0.5)
    lost = booked_worker(h, "r")
    for wid in (1, 2, 3):
        h.event({"kind": "worker_state", "worker_id": wid, "state": "unreachable"})
    h.clock.advance(61)
    h.drain()
    assert h.events(["sched.instance.rescheduled"]) == []
    assert len(h.events(["sched.reschedule.suspended"])) == 3
    for wid in {1, 2, 3} - {lost}:
        h.event({"kind": "worker_state", "worker_id": wid, "state": "ready"})
    h.clock.advance(61)
    h.drain()
    assert [e.data["from_request"] for e in h.events(["sched.instance.rescheduled"])] == ["r"]


def test_control_plane_instances_on_a_lost_worker_are_reported_not_moved() -> None:
    h = Harness()
    row = {
        "id": 5,
        "name": "cp",
        "worker_id": 1,
        "gpu_type": "cuda",
        "gpu_indexes": [0],
        "computed_resource_claim": {"vram": {"0": GIB}},
    }
    h.apply({"workers": [worker_row(1, "a"), worker_row(2, "b")], "model_instances": [row]})
    h.event({"kind": "worker_state", "worker_id": 1, "state": "unreachable"})
    h.clock.advance(61)
    h.drain()
    lost = h.events(["sched.instance.lost"])
    assert [e.data["instance_key"] for e in lost] == ["id:5"]
    assert "id:5" in h.rt.cluster.instance_meta()


def test_a_redelivered_state_event_keeps_the_outage_clock_it_started() -> None:
    h = two_workers_with_a_booking()
    lost = booked_worker(h, "r")
    current = h.rt.cluster.worker_row(lost)
    down = Worker.model_validate_json(current or "").model_copy(update={"state": "unreachable"})
    h.rt.cluster.upsert_worker(down, current, {"kind": "worker_state"})  # applied; the caller died
    again = h.event({"kind": "worker_state", "worker_id": lost, "state": "unreachable"})
    assert again["status"] == "unchanged"
    h.clock.advance(61)
    h.drain()
    h.pump()
    assert [e.data["from_request"] for e in h.events(["sched.instance.rescheduled"])] == ["r"]


def test_a_snapshot_reporting_a_worker_down_starts_its_outage_clock() -> None:
    h = two_workers_with_a_booking()
    lost = booked_worker(h, "r")
    rows = [
        worker_row(1, "a", labels={"gpu": "x"}),
        worker_row(2, "b", labels={"gpu": "x"}),
        worker_row(3, "c", labels={"gpu": "spare"}),
    ]
    rows[lost - 1] = {**rows[lost - 1], "state": "unreachable"}
    h.apply({"workers": rows, "model_instances": []})
    health = h.events(["sched.worker.health"])
    assert [(e.data["worker_id"], e.data["state"]) for e in health] == [(lost, "unreachable")]
    assert_rescheduled_after_grace(h)


def test_a_snapshot_reporting_a_worker_ready_again_restarts_its_hysteresis() -> None:
    h = two_workers_with_a_booking()
    lost = booked_worker(h, "r")
    rows = [
        worker_row(1, "a", labels={"gpu": "x"}),
        worker_row(2, "b", labels={"gpu": "x"}),
        worker_row(3, "c", labels={"gpu": "spare"}),
    ]
    h.event({"kind": "worker_state", "worker_id": lost, "state": "unreachable"})
    h.clock.advance(10)
    h.drain()
    h.apply({"workers": rows, "model_instances": []})  # the control plane says: ready again
    h.clock.advance(31)  # ready for longer than ready_stable_s: the outage clock resets
    h.drain()
    assert read_health(h.rt, lost).down_since_ms is None
    h.event({"kind": "worker_state", "worker_id": lost, "state": "unreachable"})
    h.clock.advance(50)  # a new outage, shorter than the grace
    h.drain()
    assert h.events(["sched.instance.rescheduled"]) == []


def test_a_vanished_worker_loses_its_clocks() -> None:
    h = two_workers_with_a_booking()
    h.event({"kind": "worker_state", "worker_id": 3, "state": "unreachable"})
    assert h.rt.client.zscore(h.rt.keys.timers, "grace:3") is not None
    h.apply(cluster_of(worker_row(1, "a", labels={"gpu": "x"}), worker_row(2, "b", labels={"gpu": "x"})))
    assert h.rt.client.hget(h.rt.keys.health, "3") is None
    assert h.rt.client.zscore(h.rt.keys.timers, "grace:3") is None
