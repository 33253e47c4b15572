"""Withdrawing a request: one terminal ``cancelled`` result, never a booking, at every step."""

from __future__ import annotations

import json

from builders import GIB
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from service_builders import (
    cluster_of,
    small_request,
    statuses,
    two_workers_with_a_booking,
    uniform_cluster,
    worker_row,
)

from tasks.base.step import Step
from tasks.decision.decide import decide
from tasks.decision.publish import publish
from tasks.decision.reserve import reserve
from tasks.flows.cancels import cancel_request
from tasks.testing import Harness, booking_violations, isolated_settings

TWENTY_GIB = {"GPUSTACK_MODEL_VRAM_CLAIM": str(20 * GIB)}


def _terminals(h: Harness, rid: str) -> list[str]:
    return [r["status"] for r in h.results() if r["request_id"] == rid and r["terminal"] == "1"]


def _booked(h: Harness) -> set[str]:
    return {meta.request_id or "" for meta in h.rt.cluster.instance_meta().values()}


def test_a_queued_request_is_cancelled_once_and_its_decision_message_does_nothing() -> None:
    h = Harness()
    h.apply(uniform_cluster())
    h.submit(small_request("r"))
    outcome = cancel_request(h.rt, "r")
    assert outcome == {"request_id": "r", "status": "cancelled", "state": "queued"}
    assert h.pump() == 1  # the queued decide message arrives after the cancel
    assert statuses(h) == [("r", "cancelled")]
    assert json.loads(h.results()[0]["result"]) == json.loads(h.record("r")["result"])
    assert json.loads(h.results()[0]["result"])["status"] == "cancelled"
    assert _booked(h) == set() and h.events(["sched.decision.made"]) == []
    assert h.rt.client.zcard(h.rt.keys.outbox) == 0  # no watchdog left to re-drive it
    assert cancel_request(h.rt, "r")["status"] == "already_cancelled"
    assert len(h.results()) == 1
    assert h.submit(small_request("r")).status == "duplicate"  # the id stays taken


def test_a_parked_request_is_cancelled_and_never_books_when_capacity_frees() -> None:
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a")))
    h.submit(small_request("first", env=TWENTY_GIB))
    h.submit(small_request("waits", env=TWENTY_GIB))
    h.pump()
    assert h.record("waits")["state"] == "parked"
    assert cancel_request(h.rt, "waits")["state"] == "parked"
    assert "waits" not in h.rt.parked.entries()
    freed = h.event({"kind": "instance_deleted", "request_id": "first"})
    assert freed["status"] == "released" and freed["woken"] == []
    h.pump()
    h.clock.advance(h.settings.stuck_after_s * 100)
    h.drain()
    h.pump()
    assert statuses(h) == [
        ("first", "scheduled"), ("waits", "unschedulable"), ("waits", "cancelled"), ("first", "released"),
    ]
    assert _booked(h) == set()


def test_a_retrying_request_is_cancelled_and_its_retry_does_nothing() -> None:
    h = Harness(settings=isolated_settings(decide_lock=False))
    h.apply(cluster_of(worker_row(1, "a")))
    h.submit(small_request("a", env=TWENTY_GIB))
    h.submit(small_request("b", env=TWENTY_GIB))
    first, second = h.queue.popleft(), h.queue.popleft()
    step_a = decide(h.rt, first.request_id, 0, 0, "ta")
    step_b = decide(h.rt, second.request_id, 0, 0, "tb")  # both chose the one GPU
    assert step_a is not None and step_b is not None
    assert publish(h.rt, reserve(h.rt, step_a)) == "published"  # type: ignore[arg-type]
    assert reserve(h.rt, step_b) is None  # conflict: attempt 1 is queued
    assert h.record("b")["state"] == "retrying"
    assert cancel_request(h.rt, "b")["state"] == "retrying"
    h.pump()
    assert _terminals(h, "b") == ["cancelled"] and _booked(h) == {"a"}


def test_a_cancel_while_the_decision_is_in_flight_wins_and_nothing_books() -> None:
    h = Harness(settings=isolated_settings(decide_lock=False))
    h.apply(uniform_cluster())
    h.submit(small_request("r"))
    item = h.queue.popleft()
    step = decide(h.rt, item.request_id, 0, 0, "t")  # decided: its booking is the next step
    assert step is not None and h.record("r")["state"] == "decided"
    assert cancel_request(h.rt, "r")["state"] == "decided"
    assert reserve(h.rt, step) is None  # the booking refuses: the record is done
    assert statuses(h) == [("r", "cancelled")] and _booked(h) == set()


def test_a_cancel_racing_a_booking_releases_it_and_the_late_publish_does_nothing() -> None:
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a")))
    h.submit(small_request("r", env=TWENTY_GIB))
    h.submit(small_request("waits", env=TWENTY_GIB))
    item = h.queue.popleft()
    step = decide(h.rt, item.request_id, 0, 0, "t")  # under the lease: booked, publish left
    assert step is not None and step.action == "publish" and h.record("r")["state"] == "booked"
    h.pump()  # "waits" finds the GPU booked and parks
    outcome = cancel_request(h.rt, "r")
    assert outcome["status"] == "cancelled" and outcome["state"] == "booked"
    assert outcome["woken"] == ["waits"]  # the freed GPU wakes who waited for it
    assert publish(h.rt, step) == "duplicate"
    assert _terminals(h, "r") == ["cancelled"] and _booked(h) == set()
    released = h.events(["sched.instance.released"])
    assert released[-1].data["reason"] == "client" and released[-1].data["released"][0]["key"] == "req:r"
    h.pump()
    assert _terminals(h, "waits") == ["scheduled"] and booking_violations(h.rt) == []


def test_a_published_placement_is_released_not_cancelled_twice() -> None:
    h = Harness()
    h.apply(uniform_cluster())
    h.submit(small_request("r"))
    h.pump()
    outcome = cancel_request(h.rt, "r")
    assert outcome["status"] == "released" and outcome["state"] == "done"
    assert _booked(h) == set() and _terminals(h, "r") == ["scheduled"]
    assert cancel_request(h.rt, "r") == {"request_id": "r", "status": "finished", "state": "scheduled"}
    assert cancel_request(h.rt, "nosuch") == {"request_id": "nosuch", "status": "unknown"}


def test_a_cancel_follows_a_moved_booking_to_the_request_that_replaced_it() -> None:
    h = two_workers_with_a_booking()
    h.event({"kind": "worker_removed", "worker_id": 1})  # both gpu=x workers leave: r~1 fits nowhere
    h.event({"kind": "worker_removed", "worker_id": 2})
    h.pump()  # r~1 fits nowhere (no worker left with gpu=x): parked
    assert h.record("r~1")["state"] == "parked" and h.record("r")["moved_to"] == "r~1"
    outcome = cancel_request(h.rt, "r")
    assert outcome == {
        "request_id": "r", "status": "finished", "state": "scheduled",
        "moved_to": {"request_id": "r~1", "status": "cancelled", "state": "parked"},
    }
    assert _terminals(h, "r~1") == ["cancelled"]


def test_the_cluster_event_and_instance_deleted_withdraw_a_parked_request() -> None:
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a")))
    for rid in ("first", "p1", "p2"):
        h.submit(small_request(rid, env=TWENTY_GIB))
    h.pump()
    assert h.event({"kind": "request_cancelled", "request_id": "p1"})["status"] == "cancelled"
    deleted = h.event({"kind": "instance_deleted", "request_id": "p2"})
    assert deleted["status"] == "cancelled"
    assert h.event({"kind": "request_cancelled", "request_id": "p2"})["status"] == "already_cancelled"
    assert h.event({"kind": "request_cancelled"})["status"] == "rejected"
    by = [e.data["by"] for e in h.events(["sched.request.cancelled"])]
    assert by == ["cluster_event", "instance_deleted"]
    h.event({"kind": "instance_deleted", "request_id": "first"})
    h.pump()
    assert _booked(h) == set() and _terminals(h, "p1") == _terminals(h, "p2") == ["cancelled"]


class _Steps:
    """Pipeline steps run one at a time, with cancels in between."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.to_reserve: list[Step] = []
        self.to_publish: list[Step] = []
        self.cancelled: set[str] = set()
        self.submitted = 0

    def submit(self) -> None:
        self.h.submit(small_request(f"r{self.submitted}", env=TWENTY_GIB))
        self.submitted += 1

    def decide(self) -> None:
        if self.h.queue:
            item = self.h.queue.popleft()
            step = decide(self.h.rt, item.request_id, item.seq, item.attempt, "t")
            if step is not None:
                (self.to_reserve if step.action == "reserve" else self.to_publish).append(step)

    def reserve(self) -> None:
        if self.to_reserve:
            after = reserve(self.h.rt, self.to_reserve.pop(0))
            if after is not None:
                self.to_publish.append(after)

    def publish(self) -> None:
        if self.to_publish:
            publish(self.h.rt, self.to_publish.pop(0))

    def cancel(self) -> None:
        if self.submitted:
            rid = f"r{len(self.cancelled) % self.submitted}"
            if cancel_request(self.h.rt, rid)["status"] in ("cancelled", "already_cancelled"):
                self.cancelled.add(rid)

    def free(self) -> None:
        held = sorted(self.h.rt.cluster.instance_meta())
        if held:
            self.h.event({"kind": "instance_deleted", "instance_key": held[0]})

    def drain(self) -> None:
        self.h.clock.advance(self.h.settings.stuck_after_s * 40)
        self.h.drain()

    def finish(self) -> None:
        while self.to_reserve or self.to_publish:
            self.reserve()
            self.publish()
        self.h.pump()

    def check(self) -> None:
        assert booking_violations(self.h.rt) == [] and not self.cancelled & _booked(self.h)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(["submit", "decide", "reserve", "publish", "cancel", "free", "drain"]),
             min_size=4, max_size=30),
    st.booleans(),
)
def test_cancels_interleaved_with_any_step_never_book_and_finish_once(ops: list[str], lease: bool) -> None:
    h = Harness(settings=isolated_settings(decide_lock=lease))
    h.apply(cluster_of(worker_row(1, "a"), worker_row(2, "b")))
    run = _Steps(h)
    for op in ops:
        getattr(run, op)()
        run.check()
    run.finish()
    run.check()
    terminal = [f["request_id"] for f in h.results() if f["terminal"] == "1"]
    assert len(terminal) == len(set(terminal))
    assert {f["request_id"] for f in h.results() if f["status"] == "cancelled"} == run.cancelled
