"""Acknowledgements against a real master and replica (``WAIT``): confirmed, late, missing.

A real ``redis-server`` master and a replica (``--replicaof``); no Sentinel is
needed to acknowledge (``min_replicas_acked`` set explicitly). The replica is
frozen with SIGSTOP to play a late one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from service.conftest import require_redis_server

from tasks.base.settings import Settings
from tasks.edges.client import ServiceClient, WaitTimeout
from tasks.edges.local_failover import ReplicatedRedis
from tasks.edges.localrun import start_redis
from tasks.state.replication import NotReplicated

pytestmark = pytest.mark.service

TIMEOUT_S = 0.3


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[ReplicatedRedis]:
    """A master and one replica (no Sentinel)."""
    require_redis_server()
    master = start_redis(directory=tmp_path / "master")
    replica = start_redis(directory=tmp_path / "replica", replica_of=master.port)
    group = ReplicatedRedis([master, replica], [])
    group.wait_replicating(1, 30)
    yield group
    group.thaw(1)
    group.stop()


def _client(group: ReplicatedRedis, **extra: object) -> ServiceClient:
    settings = Settings(redis_url=group.servers[0].url, min_replicas_acked=1,  # type: ignore[arg-type]
                        replica_ack_timeout_s=TIMEOUT_S, **extra)
    return ServiceClient(settings)


def test_an_acknowledgement_waits_for_the_replica_and_stores_what_it_holds(pair: ReplicatedRedis) -> None:
    client = _client(pair)
    try:
        entry = client.rt.client.xadd(client.rt.keys.results, {"request_id": "r", "terminal": "1"})
        position = client.rt.replication.acknowledge()
        assert position is not None and position.replicas == 1
        assert position.covers(client.rt.keys.results, str(entry))
        assert pair.client(1).xrange(client.rt.keys.results)[0][0] == entry  # the replica has it
        assert client.rt.replication.position() == position
    finally:
        client.close()


def test_a_late_replica_is_not_a_silent_acknowledgement(pair: ReplicatedRedis) -> None:
    client = _client(pair)
    try:
        client.rt.replication.acknowledge()
        before = client.rt.replication.position()
        pair.freeze(1)
        client.rt.client.xadd(client.rt.keys.results, {"request_id": "late"})
        started = time.monotonic()
        with pytest.raises(NotReplicated, match="no replica confirmed the writes within 300 ms"):
            client.rt.replication.acknowledge()
        assert time.monotonic() - started < 5
        assert client.rt.replication.position() == before  # readers are not told
        pair.thaw(1)
        after = client.rt.replication.acknowledge()
        assert after is not None and after.seq > before.seq  # type: ignore[union-attr]
    finally:
        client.close()


def test_with_no_replica_attached_the_master_acknowledges_alone_unless_told_not_to(
    pair: ReplicatedRedis,
) -> None:
    pair.servers[1].stop()
    alone = _client(pair)
    strict = _client(pair, ack_without_replica=False)
    try:
        position = alone.rt.replication.acknowledge()
        assert position is not None and position.replicas == 0
        with pytest.raises(NotReplicated, match="0 of 1 with 0 attached"):
            strict.rt.replication.acknowledge()
    finally:
        alone.close()
        strict.close()


def test_a_result_is_shown_to_a_waiting_client_only_once_a_replica_has_it(pair: ReplicatedRedis) -> None:
    """Read from the results stream (``r1``) or from the request's record (``r2``)."""
    client = _client(pair)
    try:
        k = client.rt.keys
        client.rt.replication.acknowledge()
        pair.freeze(1)
        results = {rid: {"request_id": rid, "status": "scheduled"} for rid in ("r1", "r2")}
        for rid, result in results.items():
            fields = {"request_id": rid, "terminal": "1", "status": "scheduled", "result": json.dumps(result)}
            entry = client.rt.client.xadd(k.results, fields)  # type: ignore[arg-type]
        record = {"state": "done", "result": json.dumps(results["r2"]), "result_id": str(entry)}
        client.rt.client.hset(k.request("r2"), mapping=record)
        assert client.stored_result("r2") is None
        for rid in results:
            with pytest.raises(WaitTimeout):
                client.wait(rid, timeout=0.5)
        pair.thaw(1)
        client.rt.replication.acknowledge()
        assert client.stored_result("r2") == results["r2"]
        assert client.stored_result("r1") is None  # no record: only the stream has it
        assert client.wait("r1", timeout=5) == results["r1"]
    finally:
        client.close()
