"""A change's follow-up: rescheduled once, also when the caller died or a reply was lost."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from builders import GIB
from service_builders import (
    booked_worker,
    cluster_of,
    small_request,
    statuses,
    two_workers_with_a_booking,
    worker_row,
)

from tasks.flows import followups
from tasks.flows.followups import run_followup
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


# ---------------------------------------------------------- freed GPUs wake whom they can hold
def _full_host_with_waiters(*waiters: dict[str, Any]) -> Harness:
    """One host with two RTX 4090s, both taken ("fill-0", "fill-1"), then ``waiters``
    parked one after the other (each LLM claims most of a GPU: one per GPU)."""
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a", 2)))
    for n in range(2):
        h.submit(small_request(f"fill-{n}"))
    h.pump()
    for waiter in waiters:
        h.submit(waiter)
        h.pump()
        h.clock.advance(0.01)  # parked one after the other
    return h


def _woken(h: Harness) -> list[str]:
    return [str(event.request_id) for event in h.events(["sched.request.woken"])]


def test_a_freed_gpu_wakes_only_as_many_waiters_as_it_holds_oldest_first() -> None:
    h = _full_host_with_waiters(*(small_request(f"w-{n}") for n in range(5)))
    assert set(h.rt.parked.entries()) == {f"w-{n}" for n in range(5)}
    h.event({"kind": "instance_deleted", "request_id": "fill-0"})
    assert _woken(h) == ["w-0"]
    h.pump()
    assert statuses(h)[-1] == ("w-0", "scheduled")
    assert h.rt.client.zcard(h.rt.keys.followups) == 1  # the others are checked again later
    h.clock.advance(h.settings.wake_recheck_s + 0.1)
    h.drain()  # the GPU is taken: nobody else can use it, and the check ends
    assert _woken(h) == ["w-0"]
    assert h.rt.client.zcard(h.rt.keys.followups) == 0
    assert set(h.rt.parked.entries()) == {f"w-{n}" for n in range(1, 5)}


def test_a_waiter_that_cannot_use_the_freed_gpu_passes_it_on() -> None:
    wide = small_request("wide", backend_parameters=["--tp-size", "2"])
    h = _full_host_with_waiters(wide, small_request("narrow"))
    h.event({"kind": "instance_deleted", "request_id": "fill-0"})
    assert _woken(h) == ["wide"]  # parked first; one freed GPU does not hold its two
    h.pump()
    assert "wide" in h.rt.parked.entries()
    h.clock.advance(h.settings.wake_recheck_s + 0.1)
    h.drain()
    h.pump()
    assert _woken(h) == ["wide", "narrow"]
    assert statuses(h)[-1] == ("narrow", "scheduled")
    assert h.rt.client.zcard(h.rt.keys.followups) == 0


# ------------------------------------------------------------------ a storm's new requests
def _round_trips_of_rescheduling(monkeypatch: pytest.MonkeyPatch, bookings: int) -> tuple[int, list[str]]:
    """Remove the worker holding ``bookings`` one-GPU bookings; the round trips to Redis of the
    follow-up's rescheduling (commands sent alone, pipelines) and the new request ids."""
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a", bookings)))
    for n in range(bookings):
        h.submit(small_request(f"r{n}"))
    h.pump()
    h.event({"kind": "worker_added", "worker": worker_row(2, "b", bookings)})
    counted = [0]
    send, execute = h.rt.client.execute_command, redis.client.Pipeline.execute

    def sent_alone(*args: Any, **options: Any) -> Any:
        counted[0] += 1
        return send(*args, **options)

    def pipelined(pipe: redis.client.Pipeline, *args: Any, **options: Any) -> Any:
        counted[0] += 1
        return execute(pipe, *args, **options)

    def rescheduling(*args: Any) -> list[str]:
        counted[0] = 0
        with pytest.MonkeyPatch.context() as counting:
            counting.setattr(h.rt.client, "execute_command", sent_alone)
            counting.setattr(redis.client.Pipeline, "execute", pipelined)
            return reschedule(*args)

    reschedule = followups.reschedule_released
    monkeypatch.setattr(followups, "reschedule_released", rescheduling)
    summary = h.event({"kind": "worker_removed", "worker_id": 1})
    return counted[0], sorted(summary["rescheduled"])


def test_a_storm_s_new_requests_are_recorded_in_as_many_round_trips_as_one_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Recorded one by one, each booking of a lost worker cost five round trips (the storm's
    394 took 2.2 s in the applying process before any decision was sent): the old records,
    the new ids, the new records and the old records' ``moved_to`` now go together."""
    one, ids_one = _round_trips_of_rescheduling(monkeypatch, 1)
    many, ids_many = _round_trips_of_rescheduling(monkeypatch, 6)
    assert ids_one == ["r0~1"] and ids_many == [f"r{n}~1" for n in range(6)]
    assert many == one
