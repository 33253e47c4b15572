"""The audit event: its envelope, its types, and a stream that is never trimmed."""

from __future__ import annotations

import re

import fakeredis
import pytest

from tasks.base.events import EVENT_TYPES, SCHEMA_VERSION, Event, EventMeta, append_event, event_fields
from tasks.state.scripts import (
    SCRIPT_DIR,
    SCRIPT_NAMES,
)
from tasks.state.streams import iter_stream
from tasks.testing import Harness, isolated_settings


@pytest.fixture
def client() -> fakeredis.FakeRedis:
    return fakeredis.FakeRedis(decode_responses=True, version=(7, 0))


def test_envelope_round_trips() -> None:
    meta = EventMeta("e1", "2026-01-01T00:00:00.000000Z", "host:1")
    fields = event_fields(
        "sched.request.parked", {"reasons": ["x"]}, request_id="r", cluster_version=7, meta=meta
    )
    event = Event.from_entry("1-0", fields)
    assert event.schema_version == SCHEMA_VERSION
    assert (event.type, event.request_id, event.cluster_version) == ("sched.request.parked", "r", 7)
    assert event.data == {"reasons": ["x"]} and event.source == "host:1"


def test_cluster_wide_events_have_no_request_or_version() -> None:
    event = Event.from_entry("1-0", event_fields("sched.worker.health", {}))
    assert event.request_id is None and event.cluster_version is None


def test_every_event_a_scenario_writes_is_a_known_versioned_type() -> None:
    h = Harness()
    h.apply(
        {
            "workers": [
                {
                    "id": 1,
                    "name": "a",
                    "state": "ready",
                    "status": {"gpu_devices": [{"type": "cuda", "index": 0, "memory": {"total": 1 << 34}}]},
                }
            ],
            "model_instances": [],
        }
    )
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
    for name in (*SCRIPT_NAMES, "lib"):
        source = (SCRIPT_DIR / f"{name}.lua").read_text()
        emit = re.search(r"local function emit\(.*?\nend\n", source, re.S)
        if emit:
            assert "MAXLEN" not in emit.group(0) and "MINID" not in emit.group(0), name


def test_scripts_keep_the_events_they_write_when_the_other_streams_are_trimmed() -> None:
    h = Harness(settings=isolated_settings(results_maxlen=1000))
    for n in range(1100):  # each: received, rejected, published events and one result entry
        h.rt.results.reject(
            f"r{n}", request_json="{}", request_digest="d", result_json="{}", result_digest="d", error=None
        )
    assert h.rt.client.xlen(h.rt.keys.events) == 3 * 1100
    assert h.events()[0].request_id == "r0" and h.events()[-1].request_id == "r1099"
