"""Redis/broker outages requeue the message, never counted as a crash or an error."""

from __future__ import annotations

import pytest
import redis
from builders import model
from celery.exceptions import Reject
from service_builders import SMALL
from task_delivery import deliver, raising

from tasks.decision import decide as decide_stage
from tasks.runtime import worker_tasks
from tasks.testing import Harness


def test_redis_errors_requeue_without_counting_as_crashes(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.submit({"request_id": "r", "model": model(env=SMALL)})
    monkeypatch.setattr(decide_stage, "decide_and_finish", raising(redis.ConnectionError("broker hiccup")))
    for _ in range(h.settings.max_crashes + 3):
        with pytest.raises(Reject):
            deliver(worker_tasks.decide, "msg-1", "r", 0, 0)
    assert h.rt.client.get(h.rt.keys.delivery("msg-1")) is None
    assert h.rt.client.xlen(h.rt.keys.deadletter) == 0 and h.results() == []


def test_redis_errors_inside_the_guard_requeue_instead_of_acknowledging(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.submit({"request_id": "r", "model": model(env=SMALL)})
    monkeypatch.setattr(decide_stage, "decide_and_finish", raising(ValueError("bug")))
    monkeypatch.setattr(h.rt.deliveries, "count_error", raising(redis.ConnectionError("down")))
    with pytest.raises(Reject) as requeued:
        deliver(worker_tasks.decide, "msg-1", "r", 0, 0)
    assert requeued.value.requeue
    monkeypatch.setattr(h.rt.deliveries, "count_error", lambda task_id: 99)
    monkeypatch.setattr(h.rt.deliveries, "dead_letter", raising(redis.TimeoutError("slow")))
    with pytest.raises(Reject) as again:
        deliver(worker_tasks.decide, "msg-1", "r", 0, 0)
    assert again.value.requeue
