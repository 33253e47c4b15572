"""Notices on the results stream: released placements (before their replacement), suspended rescheduling."""

from __future__ import annotations

import json

from service_builders import (
    booked_worker,
    cluster_of,
    small_request,
    two_workers_with_a_booking,
    worker_row,
)

from tasks.flows.followups import run_followup
from tasks.testing import Harness, isolated_settings


def _entries(h: Harness) -> list[tuple[str, str, str, str]]:
    """(request id, status, terminal, reschedule_of) of every results entry."""
    return [(r["request_id"], r["status"], r["terminal"], r.get("reschedule_of", "")) for r in h.results()]


def test_a_moved_placement_is_released_then_replaced_by_a_result_naming_it() -> None:
    h = two_workers_with_a_booking()
    h.event({"kind": "worker_removed", "worker_id": booked_worker(h, "r")})
    h.pump()
    assert _entries(h) == [
        ("r", "scheduled", "1", ""),
        ("r", "released", "0", ""),
        ("r~1", "scheduled", "1", "r"),
    ]
    released = h.results()[1]
    assert released["reason"] == "worker_removed"
    assert json.loads(released["result"]) == {
        "request_id": "r", "status": "released", "instance_key": "req:r", "reason": "worker_removed",
        "rescheduling": True,
    }
    # the replacement moves again (no gpu=x worker is left: it waits): each entry names the chain
    h.event({"kind": "worker_removed", "worker_id": booked_worker(h, "r~1")})
    h.pump()
    assert _entries(h)[3:] == [("r~1", "released", "0", "r"), ("r~2", "unschedulable", "0", "r~1")]


def test_a_release_is_announced_once_even_when_its_follow_up_runs_twice() -> None:
    h = two_workers_with_a_booking()
    meta = h.rt.partition.meta()
    h.rt.cluster.release(["req:r"], "instance_deleted", wake="capacity_freed", meta=meta)
    job = h.rt.client.hget(h.rt.keys.followup_jobs, meta.event_id)
    run_followup(h.rt, meta.event_id)
    h.rt.client.hset(h.rt.keys.followup_jobs, meta.event_id, job)  # the drainer's leased copy
    run_followup(h.rt, meta.event_id)
    assert _entries(h) == [("r", "scheduled", "1", ""), ("r", "released", "0", "")]
    assert json.loads(h.results()[1]["result"])["rescheduling"] is False


def test_a_parked_move_carries_reschedule_of_on_its_notice() -> None:
    h = two_workers_with_a_booking()
    h.event({"kind": "worker_removed", "worker_id": 1})
    h.event({"kind": "worker_removed", "worker_id": 2})  # no gpu=x worker left
    h.pump()
    assert ("r~1", "unschedulable", "0", "r") in _entries(h)


def test_suspended_and_resumed_rescheduling_are_announced_once_each() -> None:
    h = Harness(settings=isolated_settings(unreachable_grace_s=60, ready_stable_s=30,
                                           max_unreachable_fraction=0.5))
    h.apply(cluster_of(*(worker_row(w, f"w{w}") for w in range(1, 5))))
    h.submit(small_request("r"))
    h.pump()
    lost = booked_worker(h, "r")
    others = [w for w in range(1, 5) if w != lost]
    for wid in (lost, others[0], others[1]):  # 3 of 4 down: above the 0.5 share
        h.event({"kind": "worker_state", "worker_id": wid, "state": "unreachable"})
    for _ in range(3):  # grace timers keep firing while suspended: one notice
        h.clock.advance(61)
        h.drain()
    notices = [e for e in _entries(h) if e[0] == ""]
    assert notices == [("", "reschedule_suspended", "0", "")]
    assert json.loads(h.results()[-1]["result"]) == {
        "status": "reschedule_suspended", "down": 3, "vanished": 0, "workers": 4,
        "max_unreachable_fraction": 0.5,
    }
    assert h.rt.cluster.instance_meta()["req:r"].workers == (lost,)  # nothing moved
    h.event({"kind": "worker_state", "worker_id": others[0], "state": "ready"})  # 2 of 4: resumed
    h.event({"kind": "worker_state", "worker_id": others[1], "state": "ready"})
    assert [e for e in _entries(h) if e[0] == ""] == [
        ("", "reschedule_suspended", "0", ""), ("", "reschedule_resumed", "0", ""),
    ]
    assert [e.data["down"] for e in h.events(["sched.reschedule.resumed"])] == [2]
    h.clock.advance(61)
    h.drain()
    h.pump()
    assert _entries(h)[-2:] == [("r", "released", "0", ""), ("r~1", "scheduled", "1", "r")]
