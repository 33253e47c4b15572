"""The worker middleware and the Celery tasks on fakeredis: crashes, Redis errors, poison messages.

The Celery tasks are called in process with a pushed request context (as a
worker would call them), so every delivery runs through the middleware stack,
against a :class:`tasks.testing.Harness` runtime.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from builders import GIB, RTX_4090, model, uniform_worker
from celery.exceptions import Ignore, Reject

from tasks.decision import decide as decide_stage
from tasks.decision.decide import Progress, decide
from tasks.decision.publish import publish
from tasks.intake import requests as intake_requests
from tasks.runtime import worker_tasks
from tasks.testing import Harness, isolated_settings

SMALL = {"GPUSTACK_MODEL_VRAM_CLAIM": str(10 * GIB)}


@pytest.fixture
def h(monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    harness = Harness(settings=isolated_settings(transient_backoff_s=0, max_task_errors=2))
    harness.apply({"workers": [uniform_worker(1, "w1", 1, RTX_4090)], "model_instances": []})
    monkeypatch.setattr(worker_tasks, "runtime", lambda: harness.rt)
    yield harness


def _deliver(task: Any, task_id: str, *args: Any) -> Any:
    """One delivery of a message of ``task`` (as the worker's pool process runs it)."""
    task.push_request(id=task_id, called_directly=False, chain=None, callbacks=None)
    try:
        return task(*args)
    finally:
        task.pop_request()


def _raising(error: BaseException) -> Callable[..., Any]:
    def fail(*_: Any, **__: Any) -> Any:
        raise error

    return fail


def test_redis_errors_requeue_without_counting_as_crashes(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.submit({"request_id": "r", "model": model(env=SMALL)})
    monkeypatch.setattr(decide_stage, "decide_and_finish", _raising(redis.ConnectionError("broker hiccup")))
    for _ in range(h.settings.max_crashes + 3):
        with pytest.raises(Reject):
            _deliver(worker_tasks.decide, "msg-1", "r", 0, 0)
    assert h.rt.client.get(h.rt.keys.delivery("msg-1")) is None
    assert h.rt.client.xlen(h.rt.keys.deadletter) == 0 and h.results() == []


def test_a_clear_that_failed_during_an_outage_is_done_before_the_next_task(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.submit({"request_id": "r", "model": model(env=SMALL)})
    monkeypatch.setattr(decide_stage, "decide_and_finish", _raising(redis.ConnectionError("down")))
    monkeypatch.setattr(h.rt.deliveries, "clear_delivery", _raising(redis.ConnectionError("still down")))
    with pytest.raises(Reject):
        _deliver(worker_tasks.decide, "msg-1", "r", 0, 0)
    assert h.rt.client.get(h.rt.keys.delivery("msg-1")) == "1"
    monkeypatch.undo()
    monkeypatch.setattr(worker_tasks, "runtime", lambda: h.rt)
    monkeypatch.setattr(decide_stage, "decide_and_finish", _raising(redis.ConnectionError("down")))
    with pytest.raises(Reject):
        _deliver(worker_tasks.decide, "msg-2", "r", 0, 0)  # any next task of this process
    assert h.rt.client.get(h.rt.keys.delivery("msg-1")) is None


def test_redis_errors_inside_the_guard_requeue_instead_of_acknowledging(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.submit({"request_id": "r", "model": model(env=SMALL)})
    monkeypatch.setattr(decide_stage, "decide_and_finish", _raising(ValueError("bug")))
    monkeypatch.setattr(h.rt.deliveries, "count_error", _raising(redis.ConnectionError("down")))
    with pytest.raises(Reject) as requeued:
        _deliver(worker_tasks.decide, "msg-1", "r", 0, 0)
    assert requeued.value.requeue
    monkeypatch.setattr(h.rt.deliveries, "count_error", lambda task_id: 99)
    monkeypatch.setattr(h.rt.deliveries, "dead_letter", _raising(redis.TimeoutError("slow")))
    with pytest.raises(Reject) as again:
        _deliver(worker_tasks.decide, "msg-1", "r", 0, 0)
    assert again.value.requeue


class _Killed(BaseException):
    """Stands for whatever kills a process while it validates a request."""


def test_the_guard_dead_letters_a_raw_request_without_validating_it(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = {"request_id": "poison", "model": model(env=SMALL)}
    h.rt.client.set(h.rt.keys.delivery("msg-1"), h.settings.max_crashes)  # every delivery died

    class Deadly:
        @staticmethod
        def model_validate(*_: Any, **__: Any) -> Any:
            raise _Killed

    monkeypatch.setattr(intake_requests, "ScheduleRequest", Deadly)
    with pytest.raises(Ignore):
        _deliver(worker_tasks.decide, "msg-1", raw)
    (result,) = h.results()
    assert (result["request_id"], result["status"]) == ("poison", "rejected")
    assert json.loads(result["result"])["error"]["code"] == "dead_lettered"
    assert h.record("poison")["intake_task"] == "msg-1"


def test_a_malformed_step_naming_an_inflight_request_does_not_reject_it(h: Harness) -> None:
    h.submit({"request_id": "r", "model": model(env=SMALL)})
    item = h.queue.popleft()
    step = decide(h.rt, item.request_id, item.seq, item.attempt, "t")
    assert step is not None and h.record("r")["state"] == "booked"
    garbage = {"action": "reserve", "request_id": "r", "seq": 0, "attempt": 0, "unexpected": 1}
    for _ in range(h.settings.max_task_errors - 1):
        with pytest.raises(Reject):
            _deliver(worker_tasks.resume, "msg-x", garbage)
    with pytest.raises(Ignore):
        _deliver(worker_tasks.resume, "msg-x", garbage)
    (entry,) = h.rt.client.xrange(h.rt.keys.deadletter)
    assert (entry[1]["request_id"], entry[1]["reason"]) == ("", "task_error")
    assert h.results() == [] and h.record("r")["state"] == "booked"
    assert publish(h.rt, step) == "published"


def test_a_message_that_keeps_dying_after_booking_publishes_the_booking(h: Harness) -> None:
    h.submit({"request_id": "r", "model": model(env=SMALL)})
    item = h.queue.popleft()
    step = decide(h.rt, item.request_id, item.seq, item.attempt, "t")
    assert step is not None
    h.rt.client.set(h.rt.keys.delivery("msg-p"), h.settings.max_crashes)
    with pytest.raises(Ignore):
        _deliver(worker_tasks.resume, "msg-p", step.to_dict())
    assert [(r["status"], r["terminal"]) for r in h.results()] == [("scheduled", "1")]
    wid = h.rt.cluster.instance_meta()["req:r"].workers[0]
    assert h.event({"kind": "worker_removed", "worker_id": wid})["rescheduled"] == ["r~1"]


def test_the_decide_task_finishes_its_request_without_a_resume_message(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(h.rt, "resume", sent.append)
    for rid in ("first", "second"):
        h.submit({"request_id": rid, "model": model(env=SMALL)})
        h.queue.clear()
        assert _deliver(worker_tasks.decide, f"msg-{rid}", rid, 0, 0) == "published"
        assert sent == []  # booked and published in its own message: nothing left to resume
        h.event({"kind": "instance_deleted", "request_id": rid})  # room for the next one
    assert [r["status"] for r in h.results()] == ["scheduled", "scheduled"]
    assert h.rt.client.get(h.rt.keys.delivery("msg-first")) is None


def test_a_leftover_step_goes_on_as_one_resume_message_that_finishes_it(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.submit({"request_id": "r", "model": model(env=SMALL)})
    item = h.queue.popleft()
    step = decide(h.rt, item.request_id, item.seq, item.attempt, "t")  # recorded and booked, not published
    assert step is not None and h.record("r")["state"] == "booked"
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(h.rt, "resume", sent.append)
    monkeypatch.setattr(decide_stage, "decide_and_finish", lambda *_: Progress(step))
    assert _deliver(worker_tasks.decide, "msg-d", "r", 0, 0) == "resumed"
    assert sent == [step.to_dict()] and h.results() == []
    assert _deliver(worker_tasks.resume, "msg-r", sent[0]) == "published"
    assert [(r["status"], r["terminal"]) for r in h.results()] == [("scheduled", "1")]
