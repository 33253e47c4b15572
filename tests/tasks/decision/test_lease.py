"""The decide lease: books inside the decision, waited for, given up on, never leaked."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from service_builders import small_request, submit_and_decide, uniform_cluster

from tasks.decision.decide import Progress, decide_and_finish
from tasks.state.scripts import Batch
from tasks.testing import Harness, isolated_settings


def test_the_decide_lease_books_inside_the_decision() -> None:
    h = Harness()
    h.apply(uniform_cluster(workers=1, gpus=2))
    step = submit_and_decide(h, "a")
    assert step is not None and step.action == "publish"
    assert h.record("a")["state"] == "booked"
    assert h.rt.client.exists(h.rt.keys.decide_lock) == 0  # released


def test_a_busy_decide_lease_is_waited_for() -> None:
    h = Harness(settings=isolated_settings(decide_lock_wait_s=2.0))
    h.apply(uniform_cluster())
    h.rt.client.set(h.rt.keys.decide_lock, "another-decider", px=150)  # its holder died
    h.submit(small_request("a"))
    started = time.monotonic()
    h.pump()
    assert 0.1 < time.monotonic() - started < 1.0  # taken once it expired, not after the full wait
    assert [r["status"] for r in h.results()] == ["scheduled"]
    assert h.rt.client.exists(h.rt.keys.decide_lock) == 0


def test_a_decide_lease_not_obtained_in_time_proceeds_optimistically() -> None:
    h = Harness(settings=isolated_settings(decide_lock_wait_s=0.1))
    h.apply(uniform_cluster())
    h.rt.client.set(h.rt.keys.decide_lock, "another-decider", px=60_000)
    h.submit(small_request("b"))
    h.pump()
    assert [r["status"] for r in h.results()] == ["scheduled"]
    assert h.rt.client.get(h.rt.keys.decide_lock) == "another-decider"  # only its holder releases it


def _one_queued_decision(**settings: Any) -> tuple[Harness, Any]:
    """A harness with one submitted request and its dispatched decision taken off the queue."""
    h = Harness(settings=isolated_settings(**settings))
    h.apply(uniform_cluster())
    h.submit(small_request("a"))
    return h, h.queue.popleft()


def test_a_decide_lease_whose_acquiring_reply_was_lost_is_still_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """redis-py re-sends a pipeline whose reply was lost: the repeated SET NX meets the own token."""
    h, item = _one_queued_decision(decide_lock_wait_s=1.0)
    real_send = Batch._send
    sends: list[int] = []

    def reply_lost_once(self: Batch, todo: Any) -> list[Any]:
        sends.append(len(todo))
        if len(sends) == 1:
            real_send(self, todo)  # executed by the server, then the connection reset
        return real_send(self, todo)

    monkeypatch.setattr(Batch, "_send", reply_lost_once)
    started = time.monotonic()
    progress = decide_and_finish(h.rt, item.request_id, item.seq, item.attempt, "t")
    assert time.monotonic() - started < 0.5  # not waiting for its own lease
    assert progress == Progress(None, "published")
    assert h.rt.client.exists(h.rt.keys.decide_lock) == 0  # released with the booking


def test_a_decide_lease_taken_in_a_round_trip_that_then_failed_is_released(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h, item = _one_queued_decision(decide_lock_wait_s=1.0)
    h.rt.client.script_flush()  # Redis restarted: begin answers NOSCRIPT after the SET NX took the lease
    real_send = Batch._send
    sends: list[int] = []

    def reset_on_resend(self: Batch, todo: Any) -> list[Any]:
        sends.append(len(todo))
        if len(sends) == 2:
            raise redis.ConnectionError("connection reset")  # the re-send after loading begin
        return real_send(self, todo)

    monkeypatch.setattr(Batch, "_send", reset_on_resend)
    with pytest.raises(redis.ConnectionError):
        decide_and_finish(h.rt, item.request_id, item.seq, item.attempt, "t")
    assert h.rt.client.exists(h.rt.keys.decide_lock) == 0  # not left to its TTL
    monkeypatch.undo()
    started = time.monotonic()
    progress = decide_and_finish(h.rt, item.request_id, item.seq, item.attempt, "t")
    assert time.monotonic() - started < 0.5 and progress == Progress(None, "published")
