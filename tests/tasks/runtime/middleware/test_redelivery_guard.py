"""The redelivery guard: deliveries that keep dying are dead-lettered, their request finished."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from builders import model
from celery.exceptions import Ignore, Reject
from service_builders import SMALL
from task_delivery import deliver, raising

from tasks.decision import decide as decide_stage
from tasks.decision.decide import decide
from tasks.intake import requests as intake_requests
from tasks.runtime import worker_tasks
from tasks.testing import Harness


def test_a_clear_that_failed_during_an_outage_is_done_before_the_next_task(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.submit({"request_id": "r", "model": model(env=SMALL)})
    monkeypatch.setattr(decide_stage, "decide_and_finish", raising(redis.ConnectionError("down")))
    monkeypatch.setattr(h.rt.deliveries, "clear_delivery", raising(redis.ConnectionError("still down")))
    with pytest.raises(Reject):
        deliver(worker_tasks.decide, "msg-1", "r", 0, 0)
    assert h.rt.client.scard(h.rt.keys.delivery("msg-1")) == 1
    monkeypatch.undo()
    monkeypatch.setattr(worker_tasks, "runtime", lambda: h.rt)
    monkeypatch.setattr(decide_stage, "decide_and_finish", raising(redis.ConnectionError("down")))
    with pytest.raises(Reject):
        deliver(worker_tasks.decide, "msg-2", "r", 0, 0)  # any next task of this process
    assert h.rt.client.exists(h.rt.keys.delivery("msg-1")) == 0


class _Killed(BaseException):
    """Stands for whatever kills a process while it validates a request."""


def test_the_guard_dead_letters_a_raw_request_without_validating_it(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = {"request_id": "poison", "model": model(env=SMALL)}
    h.rt.client.sadd(h.rt.keys.delivery("msg-1"), *range(h.settings.max_crashes))  # every delivery died

    def deadly(*_: Any, **__: Any) -> Any:
        raise _Killed

    monkeypatch.setattr(intake_requests, "parse_request", deadly)
    with pytest.raises(Ignore):
        deliver(worker_tasks.decide, "msg-1", raw)
    (result,) = h.results()
    assert (result["request_id"], result["status"]) == ("poison", "rejected")
    assert json.loads(result["result"])["error"]["code"] == "dead_lettered"
    assert h.record("poison")["intake_task"] == "msg-1"


def test_a_message_that_keeps_dying_after_booking_publishes_the_booking(h: Harness) -> None:
    h.submit({"request_id": "r", "model": model(env=SMALL)})
    item = h.queue.popleft()
    step = decide(h.rt, item.request_id, item.seq, item.attempt, "t")
    assert step is not None
    h.rt.client.sadd(h.rt.keys.delivery("msg-p"), *range(h.settings.max_crashes))
    with pytest.raises(Ignore):
        deliver(worker_tasks.resume, "msg-p", step.to_dict())
    assert [(r["status"], r["terminal"]) for r in h.results()] == [("scheduled", "1")]
    wid = h.rt.cluster.instance_meta()["req:r"].workers[0]
    assert h.event({"kind": "worker_removed", "worker_id": wid})["rescheduled"] == ["r~1"]
