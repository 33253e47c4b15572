"""One alert per out-of-memory outage, one event once writes are accepted again."""

from __future__ import annotations

import json

import fakeredis
import pytest
import redis
from structlog.testing import capture_logs

from tasks.runtime.oom_watch import OutOfMemoryWatch, report_outages


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_outage_is_alerted_once_and_closed_by_the_first_accepted_write() -> None:
    clock = Clock()
    watch = OutOfMemoryWatch(clock)
    error = redis.exceptions.OutOfMemoryError("OOM")
    with capture_logs() as logs:
        watch.refused("broker ack", error)
        clock.now += 2.5
        watch.refused("task gpusched.decide", error)
        watch.refused("broker ack", error)
        assert watch.refusing and not watch.has_closed
        clock.now += 1.0
        watch.accepted()
        watch.accepted()  # nothing open any more: no second close
    assert [entry["event"] for entry in logs] == ["redis_out_of_memory", "redis_memory_recovered"]
    assert logs[0]["log_level"] == "error"
    (outage,) = watch.take_closed()
    assert outage.event_data() == {
        "since_ms": 1_000_000, "until_ms": 1_003_500, "refused_s": 3.5, "refusals": 3,
        "where": ["broker ack", "task gpusched.decide"],
    }
    assert not watch.refusing and not watch.has_closed


def test_closed_outages_are_reported_as_events_and_kept_while_redis_refuses() -> None:
    client = fakeredis.FakeRedis(decode_responses=True)
    watch = OutOfMemoryWatch(Clock())
    watch.refused("drainer", redis.exceptions.OutOfMemoryError("OOM"))
    watch.accepted()

    class Refusing(fakeredis.FakeRedis):
        def xadd(self, *args: object, **kwargs: object) -> str:
            raise redis.exceptions.OutOfMemoryError("OOM")

    assert report_outages(Refusing(decode_responses=True), "events", watch) == 0
    assert watch.has_closed
    assert report_outages(client, "events", watch) == 1
    ((_, fields),) = client.xrange("events")
    assert fields["type"] == "sched.redis.out_of_memory"
    assert json.loads(fields["data"])["where"] == ["drainer"]
    assert report_outages(client, "events", watch) == 0


@pytest.mark.parametrize("count", [1, 40])
def test_pending_outages_are_bounded(count: int) -> None:
    watch = OutOfMemoryWatch(Clock())
    for _ in range(count):
        watch.refused("x", redis.exceptions.OutOfMemoryError("OOM"))
        watch.accepted()
    assert len(watch.take_closed()) == min(count, 32)
