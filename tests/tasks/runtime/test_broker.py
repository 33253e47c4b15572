"""The broker transport rides out a Redis that refuses writes, and every app uses it."""

from __future__ import annotations

import importlib
import threading

import pytest
import redis

from tasks.base.settings import Settings
from tasks.runtime import broker
from tasks.runtime.celery_app import celery_config
from tasks.runtime.oom_watch import WATCH


def test_a_refused_write_is_retried_with_back_off_until_accepted() -> None:
    tries: list[int] = []
    waits: list[float] = []

    def ack() -> str:
        tries.append(1)
        if len(tries) <= 6:
            raise redis.exceptions.OutOfMemoryError("OOM")
        return "acked"

    assert broker.ride_out(ack, "broker ack", sleep=waits.append) == "acked"
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6]
    assert not WATCH.refusing and WATCH.take_closed()[-1].refusals == 6


def test_the_wait_stops_when_the_worker_shuts_down() -> None:
    stop = threading.Event()
    waits: list[float] = []

    def refused() -> None:
        if len(waits) == 2:
            stop.set()  # SIGTERM arrived while waiting
        raise redis.exceptions.OutOfMemoryError("OOM")

    with pytest.raises(redis.exceptions.OutOfMemoryError):
        broker.ride_out(refused, "broker take", sleep=waits.append, stop=stop)
    assert waits == [0.05, 0.1]


def test_other_errors_are_not_ridden_out() -> None:
    def broken() -> None:
        raise redis.ConnectionError("reset")

    with pytest.raises(redis.ConnectionError):
        broker.ride_out(broken, "broker ack", sleep=lambda _: pytest.fail("no wait"))


def test_every_app_rides_out_through_the_broker_doors_transport() -> None:
    path = celery_config(Settings(redis_url="redis://h:6379/0"))["broker_transport"]
    module, _, name = path.partition(":")
    transport = getattr(importlib.import_module(module), name)
    assert issubclass(transport.Channel, broker.RideOutChannel)
    assert transport.Channel.QoS is broker.RideOutQoS
