"""A change's follow-up: rescheduled once, also when the caller died or a reply was lost."""

from __future__ import annotations

from typing import Any

from builders import GIB
from service_builders import (
    booked_worker,
    cluster_of,
    small_request,
    statuses,
    two_workers_with_a_booking,
    worker_row,
)

from tasks.state.followups import run_followup
from tasks.testing import Harness


def test_a_removed_workers_instances_are_rescheduled_with_a_new_request() -> None:
    h = two_workers_with_a_booking()
    lost = booked_worker(h, "r")
    summary = h.event({"kind": "worker_removed", "worker_id": lost})
    assert summary["rescheduled"] == ["r~1"]
    h.pump()
    assert statuses(h)[-1] == ("r~1", "scheduled")
    assert booked_worker(h, "r~1") != lost
    moved = h.events(["sched.instance.rescheduled"])[0]
    assert (moved.request_id, moved.data["from_request"]) == ("r~1", "r")
    assert h.event({"kind": "worker_removed", "worker_id": lost})["status"] == "absent"


def test_a_removal_whose_caller_died_is_rescheduled_by_the_drainer() -> None:
    h = two_workers_with_a_booking()
    lost = booked_worker(h, "r")
    h.rt.cluster.remove_worker(lost, "worker_removed")  # the script ran; its caller died
    assert h.event({"kind": "worker_removed", "worker_id": lost})["status"] == "absent"  # redelivered
    h.clock.advance(h.settings.outbox_lease_s + 1)
    assert h.drain()["followups"] == 1
    h.pump()
    assert statuses(h)[-1] == ("r~1", "scheduled")
    assert h.rt.client.zcard(h.rt.keys.followups) == 0 and h.rt.client.hlen(h.rt.keys.followup_jobs) == 0
    assert h.drain()["followups"] == 0


def test_a_retried_script_whose_reply_was_lost_still_does_its_follow_up() -> None:
    h = two_workers_with_a_booking()
    lost = booked_worker(h, "r")
    real = h.rt.cluster.remove_worker

    def reply_lost_then_retried(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)  # applied, but the reply never arrived ...
        return real(*args, **kwargs)  # ... so redis-py sent the same script (same event id) again

    h.rt.cluster.remove_worker = reply_lost_then_retried  # type: ignore[method-assign]
    summary = h.event({"kind": "worker_removed", "worker_id": lost})
    assert summary["status"] == "absent" and summary["rescheduled"] == ["r~1"]
    h.pump()
    assert statuses(h)[-1] == ("r~1", "scheduled")


def test_a_freed_gpu_wakes_its_waiters_even_if_the_caller_died() -> None:
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a")))
    h.submit(small_request("first", env={"GPUSTACK_MODEL_VRAM_CLAIM": str(20 * GIB)}))
    h.submit(small_request("waits", env={"GPUSTACK_MODEL_VRAM_CLAIM": str(20 * GIB)}))
    h.pump()
    h.rt.cluster.release(["req:first"], "instance_deleted", wake="capacity_freed")  # caller died
    assert h.event({"kind": "instance_deleted", "request_id": "first"})["status"] == "absent"
    h.clock.advance(h.settings.outbox_lease_s + 1)
    h.drain()
    h.pump()
    assert statuses(h)[-1] == ("waits", "scheduled")


def test_a_rescheduling_follow_up_run_twice_reschedules_once() -> None:
    h = two_workers_with_a_booking()
    meta = h.rt.partition.meta()
    h.rt.cluster.remove_worker(booked_worker(h, "r"), "worker_removed", meta=meta)
    job = h.rt.client.hget(h.rt.keys.followup_jobs, meta.event_id)
    assert run_followup(h.rt, meta.event_id)["rescheduled"] == ["r~1"]
    h.rt.client.hset(h.rt.keys.followup_jobs, meta.event_id, job)  # e.g. the drainer's leased copy
    assert run_followup(h.rt, meta.event_id)["rescheduled"] == ["r~1"]  # found, not redone
    assert len(h.events(["sched.request.received"])) == 2  # r and r~1 only
    assert len(h.events(["sched.instance.rescheduled"])) == 1


def test_rescheduled_ids_never_collide_with_submitted_ones() -> None:
    h = two_workers_with_a_booking()
    h.submit(small_request("r~1", worker_selector={"gpu": "spare"}))  # a user chose this id
    h.pump()
    h.event({"kind": "instance_deleted", "request_id": "r~1"})
    summary = h.event({"kind": "worker_removed", "worker_id": booked_worker(h, "r")})
    assert summary["rescheduled"] == ["r~2"]
    h.pump()
    assert statuses(h)[-1] == ("r~2", "scheduled")
    assert h.record("r~2")["reschedule_of"].startswith("req:r@")
