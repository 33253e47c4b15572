"""A transaction Redis discards at ``EXEC`` for memory is an out-of-memory outage, like ``OOM``.

kombu requeues and acknowledges held messages in ``MULTI``/``EXEC`` pipelines. When Redis
crosses ``maxmemory`` after the commands were queued (other writers filled it), ``EXEC``
answers ``EXECABORT Transaction discarded because of: OOM ...`` and redis-py raises
``ExecAbortError``, not ``OutOfMemoryError``: the broker's ride-out let it escape and the
worker node died with "Unrecoverable error" (seen in ``test_workers_ride_out_redis_out_of_memory``
on a loaded machine). Reproduced here on a real ``redis-server``, step by step on one
connection so that memory crosses the limit exactly between queuing and ``EXEC``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from service.conftest import require_redis_server

from tasks.edges.localrun import RedisServer, start_redis
from tasks.runtime import broker
from tasks.state.outages import outage_of

pytestmark = [pytest.mark.service]


@pytest.fixture
def server(tmp_path) -> Iterator[RedisServer]:
    require_redis_server()
    started = start_redis(directory=tmp_path)
    yield started
    started.stop()


def _transaction_crossing_maxmemory(client: redis.Redis, crosses: bool) -> bytes:
    """``MULTI``, a queued ``SET``, then (when ``crosses``) ``maxmemory`` drops below what is
    used before ``EXEC``; returns what ``EXEC`` answered (raises what redis-py raises)."""
    connection = client.connection_pool.get_connection()
    try:
        connection.send_command("MULTI")
        assert connection.read_response() == b"OK"
        connection.send_command("SET", "held", "message")
        assert connection.read_response() == b"QUEUED"
        if crosses:
            client.config_set("maxmemory", 1)  # used memory is now above the limit
        connection.send_command("EXEC")
        return connection.read_response()
    finally:
        client.connection_pool.release(connection)


def test_exec_discarded_for_memory_is_an_out_of_memory_outage(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url)
    with pytest.raises(redis.exceptions.ExecAbortError) as raised:
        _transaction_crossing_maxmemory(client, crosses=True)
    assert "OOM" in str(raised.value)
    assert outage_of(raised.value) == "out_of_memory"  # requeued as an outage, not a task error
    client.config_set("maxmemory", 0)


def test_the_broker_rides_out_a_transaction_discarded_for_memory(server: RedisServer) -> None:
    """The old code let the ``ExecAbortError`` out of ``ride_out`` (the worker died); now the
    write waits with back-off, as for ``OOM``, and goes through once Redis has memory again."""
    client = redis.Redis.from_url(server.url)
    calls: list[bool] = []
    waits: list[float] = []

    def requeue() -> bytes:
        calls.append(True)
        return _transaction_crossing_maxmemory(client, crosses=len(calls) == 1)

    def wait(seconds: float) -> None:
        waits.append(seconds)
        client.config_set("maxmemory", 0)  # memory freed while the broker waited

    assert broker.ride_out(requeue, "broker requeue", sleep=wait) == [b"OK"]
    assert waits == [broker.FIRST_BACKOFF_S] and len(calls) == 2
    assert client.get("held") == b"message"


def test_a_transaction_discarded_for_another_reason_is_not_ridden_out(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url)
    pipe = client.pipeline(transaction=True)
    pipe.set("k", "v")
    pipe.execute_command("NOSUCHCOMMAND")  # refused at queue time: EXEC discards the transaction
    with pytest.raises(redis.ResponseError) as raised:
        broker.ride_out(pipe.execute, "broker ack", sleep=lambda _: pytest.fail("no wait"))
    assert outage_of(raised.value) is None
