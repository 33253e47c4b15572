"""Redis/broker outages requeue the message, never counted as a crash or an error."""

from __future__ import annotations

import pytest
import redis
from builders import model
from celery.exceptions import Reject, SoftTimeLimitExceeded
from service_builders import SMALL
from task_delivery import deliver, raising

from tasks.decision import decide as decide_stage
from tasks.runtime import worker_tasks
from tasks.runtime.middleware.transient import Backoff
from tasks.runtime.oom_watch import WATCH
from tasks.testing import Harness


def test_redis_errors_requeue_without_counting_as_crashes(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.submit({"request_id": "r", "model": model(env=SMALL)})
    monkeypatch.setattr(decide_stage, "decide_and_finish", raising(redis.ConnectionError("broker hiccup")))
    for _ in range(h.settings.max_crashes + 3):
        with pytest.raises(Reject):
            deliver(worker_tasks.decide, "msg-1", "r", 0, 0)
    assert h.rt.client.exists(h.rt.keys.delivery("msg-1")) == 0
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


def test_redis_out_of_memory_requeues_and_alerts_once(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    h.submit({"request_id": "r", "model": model(env=SMALL)})
    refused = redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'")
    monkeypatch.setattr(decide_stage, "decide_and_finish", raising(refused))
    for _ in range(h.settings.max_task_errors + h.settings.max_crashes):
        with pytest.raises(Reject) as requeued:
            deliver(worker_tasks.decide, "msg-1", "r", 0, 0)
        assert requeued.value.requeue
    assert WATCH.refusing
    monkeypatch.undo()
    monkeypatch.setattr(worker_tasks, "runtime", lambda: h.rt)
    deliver(worker_tasks.decide, "msg-1", "r", 0, 0)  # memory is back: decided, outage reported
    assert not WATCH.refusing and not WATCH.has_closed
    (alert,) = h.events(["sched.redis.out_of_memory"])
    assert alert.data["refusals"] == h.settings.max_task_errors + h.settings.max_crashes
    assert h.rt.client.xlen(h.rt.keys.deadletter) == 0
    assert h.rt.client.get(h.rt.keys.task_errors("msg-1")) is None


def test_a_soft_time_limit_while_waiting_on_redis_requeues_without_counting(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.submit({"request_id": "r", "model": model(env=SMALL)})
    namespace: dict[str, object] = {"__name__": "redis.connection", "Exc": SoftTimeLimitExceeded}
    exec("def read_response(*args, **kwargs):\n    raise Exc()\n", namespace)
    monkeypatch.setattr(decide_stage, "decide_and_finish", namespace["read_response"])
    for _ in range(h.settings.max_task_errors + h.settings.max_crashes):
        with pytest.raises(Reject) as requeued:
            deliver(worker_tasks.decide, "msg-1", "r", 0, 0)
        assert requeued.value.requeue
    assert h.rt.client.exists(h.rt.keys.delivery("msg-1")) == 0
    assert h.rt.client.get(h.rt.keys.task_errors("msg-1")) is None
    assert h.rt.client.xlen(h.rt.keys.deadletter) == 0 and h.results() == []


def test_a_soft_time_limit_in_the_tasks_own_work_is_a_task_error(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.submit({"request_id": "r", "model": model(env=SMALL)})
    monkeypatch.setattr(decide_stage, "decide_and_finish", raising(SoftTimeLimitExceeded()))
    with pytest.raises(Reject):
        deliver(worker_tasks.decide, "msg-1", "r", 0, 0)
    assert h.rt.client.get(h.rt.keys.task_errors("msg-1")) == "1"


def test_the_back_off_doubles_with_each_outage_in_a_row_and_resets_once_through() -> None:
    """Issue 17, item 3: a broker that keeps failing is retried ever more gently, never given up on."""
    backoff = Backoff()
    assert [backoff.next_s("m", 0.5) for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert backoff.next_s("other", 0.5) == 0.5  # per message
    backoff.got_through("m")
    assert backoff.next_s("m", 0.5) == 0.5
