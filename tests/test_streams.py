"""Event envelope, stream helpers, consumer groups, and the Lua scripts' documentation."""

from __future__ import annotations

import json
import re

import fakeredis
import pytest

from tasks.scripts import SCRIPT_DIR, SCRIPT_NAMES, script_source
from tasks.streams import (
    EVENT_TYPES,
    SCHEMA_VERSION,
    Event,
    EventMeta,
    ack,
    append_event,
    claim_stale,
    ensure_group,
    event_fields,
    iter_stream,
    read_group,
    read_new,
)
from tasks.testing import Harness


@pytest.fixture
def client() -> fakeredis.FakeRedis:
    return fakeredis.FakeRedis(decode_responses=True, version=(7, 0))


def test_envelope_round_trips() -> None:
    meta = EventMeta("e1", "2026-01-01T00:00:00.000000Z", "host:1")
    fields = event_fields("sched.request.parked", {"reasons": ["x"]}, request_id="r",
                          cluster_version=7, meta=meta)
    event = Event.from_entry("1-0", fields)
    assert event.schema_version == SCHEMA_VERSION
    assert (event.type, event.request_id, event.cluster_version) == ("sched.request.parked", "r", 7)
    assert event.data == {"reasons": ["x"]} and event.source == "host:1"


def test_cluster_wide_events_have_no_request_or_version() -> None:
    event = Event.from_entry("1-0", event_fields("sched.worker.health", {}))
    assert event.request_id is None and event.cluster_version is None


def test_every_event_a_scenario_writes_is_a_known_versioned_type() -> None:
    h = Harness()
    h.apply({"workers": [{"id": 1, "name": "a", "state": "ready", "status": {"gpu_devices": [
        {"type": "cuda", "index": 0, "memory": {"total": 1 << 34}}]}}]})
    h.submit({"request_id": "bad", "model": {"backend": "vLLM"}})
    h.submit({"request_id": "ok", "model": {"name": "m", "env": {"GPUSTACK_MODEL_VRAM_CLAIM": "1024"}}})
    h.pump()
    h.event({"kind": "worker_state", "worker_id": 1, "state": "unreachable"})
    h.event({"kind": "instance_deleted", "request_id": "ok"})
    events = h.events()
    assert events and all(e.schema_version == SCHEMA_VERSION for e in events)
    assert {e.type for e in events} <= set(EVENT_TYPES)
    assert all(e.event_id and e.time.endswith("Z") and e.source for e in events)
    assert len({e.event_id for e in events}) == len(events)


def test_the_audit_stream_is_never_trimmed(client: fakeredis.FakeRedis) -> None:
    for n in range(1500):
        append_event(client, "gpusched:events", "sched.worker.health", {"n": n})
    assert client.xlen("gpusched:events") == 1500
    assert sum(1 for _ in iter_stream(client, "gpusched:events", page=100)) == 1500
    for name in SCRIPT_NAMES:
        source = script_source(name)
        emit = re.search(r"local function emit\(.*?\nend\n", source, re.S)
        if emit:
            assert "MAXLEN" not in emit.group(0) and "MINID" not in emit.group(0), name


def test_each_script_header_documents_every_key_and_argument() -> None:
    assert sorted(p.stem for p in SCRIPT_DIR.glob("*.lua")) == sorted(SCRIPT_NAMES)
    for name in SCRIPT_NAMES:
        source = script_source(name)
        header = "\n".join(line for line in source.splitlines() if line.startswith("--"))
        body = "\n".join(line for line in source.splitlines() if not line.startswith("--"))
        assert header.startswith(f"-- {name}.lua"), name
        for used in set(re.findall(r"KEYS\[(\d+)\]", body)):
            assert re.search(rf"KEYS\[{used}\]", header), f"{name}: KEYS[{used}] undocumented"
        for used in set(re.findall(r"ARGV\[(\d+)\]", body)):
            documented = re.search(rf"ARGV\[{used}\]", header) or _in_range(header, int(used))
            assert documented, f"{name}: ARGV[{used}] undocumented"


def _in_range(header: str, index: int) -> bool:
    """``ARGV[6..]`` / ``ARGV[6], ARGV[7], ...`` document open-ended argument lists."""
    return any(index >= int(start) for start in re.findall(r"ARGV\[(\d+)\](?:\.\.|,\s*ARGV)", header))


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
