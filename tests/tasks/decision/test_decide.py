"""One decision message: one recorded decision per attempt, deterministic, two round trips."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import pytest
from builders import H100, RTX_4090, uniform_worker
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from service_builders import small_request, uniform_cluster

from tasks.base.step import Step
from tasks.decision import decide as decide_stage
from tasks.decision.core_call import run_core
from tasks.decision.decide import Progress, decide, decide_and_finish
from tasks.decision.publish import publish
from tasks.decision.reserve import reserve
from tasks.state.scripts import Batch, Scripts
from tasks.testing import Harness, booking_violations, isolated_settings


def test_core_rejections_flow_through_the_pipeline() -> None:
    h = Harness()
    h.apply(uniform_cluster())
    h.submit(small_request("r", backend_parameters=["--tp-size", "0"]))
    h.pump()
    (result,) = h.results()
    assert result["status"] == "rejected"
    assert json.loads(result["result"])["error"]["field"] == "model.backend_parameters"


def test_stale_and_superseded_messages_do_nothing() -> None:
    h = Harness()
    h.apply(uniform_cluster())
    h.submit(small_request("r"))
    assert decide(h.rt, "r", 0, 5, "t") is None
    assert decide(h.rt, "unknown", 0, 0, "t") is None
    h.pump()
    assert decide(h.rt, "r", 0, 0, "t") is None  # already done
    assert len(h.results()) == 1


def test_decisions_are_deterministic_and_recorded_with_their_inputs() -> None:
    digests = []
    for _ in range(2):
        h = Harness()
        h.apply(uniform_cluster())
        h.submit(small_request("r"))
        h.pump()
        (decision,) = h.events(["sched.decision.made"])
        digests.append((decision.data["result_digest"], decision.data["inputs_digest"]))
        assert decision.cluster_version == 1 and decision.data["chain"]["name"] == "gpustack-default"
        assert decision.data["outcome"]["selected_candidate"]["worker_name"] == "w1"
        assert json.loads(h.results()[0]["result"])["request_id"] == "r"
    assert digests[0] == digests[1]


def test_a_duplicate_decision_of_one_attempt_continues_with_the_recorded_one() -> None:
    h = Harness(settings=isolated_settings(decide_lock=False))
    h.apply({"workers": [uniform_worker(1, "w1", 1, RTX_4090)], "model_instances": []})
    h.submit(small_request("a"))
    h.queue.clear()
    first = decide(h.rt, "a", 0, 0, "task-A")
    # the cluster changes, then the same attempt is delivered again (redelivery, re-drive)
    h.event({"kind": "worker_added", "worker": uniform_worker(2, "w2", 1, H100)})
    h.event({"kind": "worker_state", "worker_id": 1, "state": "not_ready"})
    second = decide(h.rt, "a", 0, 0, "task-B")
    assert first is not None and second is not None
    assert second.to_dict() == first.to_dict()  # not a second decision on the new cluster
    assert len(h.events(["sched.decision.made"])) == 1
    for step in (reserve(h.rt, first), reserve(h.rt, second)):
        assert step is not None and publish(h.rt, step) in ("published", "duplicate")
    (result,) = h.results()
    assert json.loads(result["result"])["candidates"][0]["worker_name"] == "w1"
    assert booking_violations(h.rt) == []


def test_a_redelivered_decision_that_had_booked_resumes_its_publish_at_once() -> None:
    h = Harness()
    h.apply(uniform_cluster())
    h.submit(small_request("r"))
    item = h.queue.popleft()
    decide(h.rt, item.request_id, item.seq, item.attempt, "t")  # booked; then killed
    assert h.record("r")["state"] == "booked"
    again = decide(h.rt, item.request_id, item.seq, item.attempt, "t")  # redelivered
    assert again is not None and again.action == "publish"
    assert publish(h.rt, again) == "published"  # no wait for the watchdog
    assert [r["status"] for r in h.results()] == ["scheduled"]


class _Interleaving:
    """Runs pipeline steps one at a time, so a test can interleave them with anything."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.delivered: list[Any] = []
        self.to_reserve: list[Step] = []
        self.to_publish: list[Step] = []

    def decide(self, n: int, *, again: bool) -> None:
        pool = deque(self.delivered[-3:]) if again else self.h.queue  # again: a duplicate delivery
        if pool:
            item = pool.popleft()
            self.delivered.append(item)
            step = decide(self.h.rt, item.request_id, item.seq, item.attempt, f"t{n}")
            if step is not None:
                (self.to_reserve if step.action == "reserve" else self.to_publish).append(step)

    def reserve(self) -> None:
        if self.to_reserve:
            reserved = reserve(self.h.rt, self.to_reserve.pop(0))
            if reserved is not None:
                self.to_publish.append(reserved)

    def publish(self) -> None:
        if self.to_publish:
            publish(self.h.rt, self.to_publish.pop(0))

    def finish(self) -> None:
        while self.to_reserve or self.to_publish:
            self.reserve()
            self.publish()
        self.h.pump()


def _cluster_change(h: Harness, op: str, n: int) -> None:
    if op == "grow":
        h.event({"kind": "worker_added", "worker": uniform_worker(10 + n, f"x{n}", 1, H100)})
    elif op in ("down", "up"):
        state = "not_ready" if op == "down" else "ready"
        h.event({"kind": "worker_state", "worker_id": 1 + n % 2, "state": state})
    elif op == "free" and h.rt.cluster.instance_meta():
        h.event({"kind": "instance_deleted", "instance_key": sorted(h.rt.cluster.instance_meta())[0]})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.sampled_from(
            ["submit", "decide", "redeliver", "reserve", "publish", "grow", "down", "up", "free"]
        ),
        min_size=4,
        max_size=24,
    ),
    st.booleans(),
)
@example(  # a decision, then the cluster changes and the same attempt is delivered again
    ["submit", "decide", "grow", "publish", "down", "redeliver", "reserve", "reserve", "publish", "publish"],
    False,
)
def test_what_is_published_is_what_is_booked(ops: list[str], lease: bool) -> None:
    """Steps of any decision interleave with duplicates and cluster changes; published == booked."""
    h = Harness(settings=isolated_settings(decide_lock=lease))
    h.apply(uniform_cluster(workers=2, gpus=1))
    run = _Interleaving(h)
    for n, op in enumerate(ops):
        if op == "submit":
            h.submit(small_request(f"r{n}"))
        elif op in ("decide", "redeliver"):
            run.decide(n, again=op == "redeliver")
        elif op == "reserve":
            run.reserve()
        elif op == "publish":
            run.publish()
        else:
            _cluster_change(h, op, n)
        assert booking_violations(h.rt) == []
    run.finish()
    assert booking_violations(h.rt) == []
    terminal = [f["request_id"] for f in h.results() if f["terminal"] == "1"]
    assert len(terminal) == len(set(terminal))


def _count_round_trips(h: Harness, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every batch and every single script call the runtime sends."""
    sent: list[str] = []
    real_execute, real_run = Batch.execute, Scripts.run

    def execute(self: Batch) -> None:
        sent.append("batch")
        real_execute(self)

    def run(self: Scripts, name: str, keys: list[str], args: list[Any]) -> Any:
        sent.append(name)
        return real_run(self, name, keys, args)

    monkeypatch.setattr(Batch, "execute", execute)
    monkeypatch.setattr(Scripts, "run", run)
    return sent


def test_under_the_lease_the_decide_message_books_and_publishes_in_two_round_trips(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Harness()
    h.apply(uniform_cluster())
    h.submit(small_request("a"))
    item = h.queue.popleft()
    sent = _count_round_trips(h, monkeypatch)
    progress = decide_and_finish(h.rt, item.request_id, item.seq, item.attempt, "t")
    assert progress == Progress(None, "published")
    assert sent == ["batch", "batch"]  # lease + begin + changes; record + reserve + release + publish
    assert [r["status"] for r in h.results()] == ["scheduled"]
    assert h.record("a")["state"] == "done" and booking_violations(h.rt) == []
    assert h.rt.client.exists(h.rt.keys.decide_lock) == 0  # released with the booking


def test_a_redelivered_decide_after_an_inline_publish_publishes_nothing_twice() -> None:
    h = Harness()
    h.apply(uniform_cluster())
    h.submit(small_request("a"))
    item = h.queue.popleft()
    first = decide_and_finish(h.rt, item.request_id, item.seq, item.attempt, "t1")
    again = decide_and_finish(h.rt, item.request_id, item.seq, item.attempt, "t1")
    other = decide_and_finish(h.rt, item.request_id, item.seq, item.attempt, "t2")
    assert first.outcome == "published"
    assert again == other == Progress(None)
    assert len(h.results()) == 1 and len(h.events(["sched.decision.made"])) == 1
    assert len(h.events(["sched.reservation.booked"])) == 1


def test_a_decide_redelivered_after_booking_publishes_the_booking_inline() -> None:
    h = Harness()
    h.apply(uniform_cluster())
    h.submit(small_request("a"))
    item = h.queue.popleft()
    decide(h.rt, item.request_id, item.seq, item.attempt, "t")  # booked; then killed
    progress = decide_and_finish(h.rt, item.request_id, item.seq, item.attempt, "t")
    assert progress == Progress(None, "published")
    assert [r["status"] for r in h.results()] == ["scheduled"] and booking_violations(h.rt) == []


def test_a_batched_publish_after_a_conflicting_reservation_publishes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Harness(settings=isolated_settings(decide_lock=False))
    h.apply(uniform_cluster(workers=1, gpus=1))
    h.submit(small_request("a"))
    h.submit(small_request("b"))
    a, b = h.queue.popleft(), h.queue.popleft()
    real_core = run_core

    def core_then_rival_books(*args: Any, **kwargs: Any) -> Any:
        decided = real_core(*args, **kwargs)
        if args[2] == "a":  # b books the only GPU between a's snapshot and a's batch
            rival = decide_and_finish(h.rt, b.request_id, b.seq, b.attempt, "tb")
            assert rival.outcome == "published"
        return decided

    monkeypatch.setattr(decide_stage, "run_core", core_then_rival_books)
    assert decide_and_finish(h.rt, a.request_id, a.seq, a.attempt, "ta") == Progress(None)
    assert [r["request_id"] for r in h.results()] == ["b"]  # a's publish refused on its own
    assert h.record("a")["state"] == "retrying"
    assert [(i.request_id, i.attempt) for i in h.queue] == [("a", 1)]  # its retry is queued
    assert booking_violations(h.rt) == []
