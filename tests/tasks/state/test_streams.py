"""Reading streams: consumer groups and plain reads."""

from __future__ import annotations

import json

import fakeredis
import pytest

from tasks.state.streams import ack, claim_stale, ensure_group, read_group, read_new


@pytest.fixture
def client() -> fakeredis.FakeRedis:
    return fakeredis.FakeRedis(decode_responses=True, version=(7, 0))


def test_consumer_group_reads_acks_and_reclaims_a_crashed_consumers_entries(
    client: fakeredis.FakeRedis,
) -> None:
    for n in range(3):
        client.xadd("gpusched:results", {"request_id": f"r{n}", "result": json.dumps({"n": n})})
    ensure_group(client, "gpusched:results", "cp")
    ensure_group(client, "gpusched:results", "cp")  # idempotent
    crashed = read_group(client, "gpusched:results", "cp", "cp-1", count=2)
    assert [f["request_id"] for _, f in crashed] == ["r0", "r1"]
    ack(client, "gpusched:results", "cp", [crashed[0][0]])
    rest = read_group(client, "gpusched:results", "cp", "cp-2")
    assert [f["request_id"] for _, f in rest] == ["r2"]
    reclaimed = claim_stale(client, "gpusched:results", "cp", "cp-2", min_idle_ms=0)
    assert [f["request_id"] for _, f in reclaimed] == ["r1", "r2"]
    assert ack(client, "gpusched:results", "cp", [entry_id for entry_id, _ in reclaimed]) == 2
    assert client.xpending("gpusched:results", "cp")["pending"] == 0


def test_read_new_returns_entries_after_an_id(client: fakeredis.FakeRedis) -> None:
    first = client.xadd("s", {"a": "1"})
    client.xadd("s", {"a": "2"})
    assert [f["a"] for _, f in read_new(client, "s", str(first))] == ["2"]
    assert read_new(client, "s", "$", block_ms=None) == []
