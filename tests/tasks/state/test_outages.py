"""What counts as a Redis outage: unreachable, out of memory, a soft time limit in a Redis wait."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from celery.exceptions import SoftTimeLimitExceeded
from kombu.exceptions import OperationalError

from tasks.state.outages import RedisOutOfMemory, outage_of


def _raised_in(*modules: str) -> BaseException:
    """A SoftTimeLimitExceeded whose traceback runs through functions of ``modules``, outermost first."""
    call: Any = None
    for module in reversed(modules):  # build innermost first: each calls the next one in
        namespace: dict[str, Any] = {"__name__": module, "inner": call, "Exc": SoftTimeLimitExceeded}
        exec("def step():\n    if inner is None:\n        raise Exc()\n    inner()\n", namespace)
        call = namespace["step"]
    try:
        call()
    except SoftTimeLimitExceeded as error:
        return error
    raise AssertionError("unreachable")


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (redis.exceptions.OutOfMemoryError("OOM"), "out_of_memory"),
        (RedisOutOfMemory("request 'r'"), "out_of_memory"),
        (redis.ConnectionError("reset"), "unreachable"),
        (redis.TimeoutError("slow"), "unreachable"),
        (redis.BusyLoadingError("loading"), "unreachable"),
        (OperationalError("broker"), "unreachable"),
        (ValueError("bug"), None),
        (redis.ResponseError("WRONGTYPE"), None),
    ],
)
def test_errors_are_told_apart(error: BaseException, kind: str | None) -> None:
    assert outage_of(error) == kind


def test_a_soft_time_limit_inside_a_redis_wait_is_a_stall() -> None:
    # billiard's signal handler raises on top of the frame that was waiting on the socket
    stalled = _raised_in("tasks.decision.lease", "redis.connection", "redis._parsers.socket", "billiard.pool")
    assert outage_of(stalled) == "stalled"
    assert outage_of(_raised_in("tasks.x", "kombu.transport.redis", "celery.app.trace")) == "stalled"


def test_a_soft_time_limit_in_the_tasks_own_work_is_a_task_error() -> None:
    assert outage_of(_raised_in("redis.client", "scheduler_core.decision", "billiard.pool")) is None
    assert outage_of(_raised_in("billiard.pool")) is None
    assert outage_of(SoftTimeLimitExceeded()) is None  # never raised: no traceback


def test_the_submit_error_names_the_request_and_says_nothing_was_written() -> None:
    text = str(RedisOutOfMemory("request 'r-1'"))
    assert "out of memory" in text and "request 'r-1' was not accepted" in text
    assert "nothing was written" in text
    assert isinstance(RedisOutOfMemory("x"), redis.exceptions.OutOfMemoryError)
