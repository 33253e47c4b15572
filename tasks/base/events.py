"""The audit event: its envelope, its types, and how Python code appends one.

An audit event is one entry of ``gpusched:events`` whose fields are the
envelope (schema version 1)::

    schema_version  "1"
    type            dotted past-tense name, e.g. "sched.request.received"
    event_id        unique id (uuid hex; Lua scripts suffix ".1", ".2" for extra events)
    time            ISO-8601 UTC time the producer observed
    source          "<host>:<pid>" of the producer
    request_id      the request it concerns, "" for cluster-wide events
    cluster_version cluster version the event produced or was decided at, "" if none
    data            JSON object, schema per type (docs/service.md)

The log is trimmed only behind the oldest audit checkpoint kept
(:mod:`tasks.audit.retention`), after writing the trimmed part to the archive
folder when one is configured; replay starts from that checkpoint. Fields are plain
strings so any Redis client can filter by ``type`` without parsing JSON.

Most events are written by the Lua scripts (``emit`` in ``lib.lua``) in the
same atomic step as the change they describe; :func:`append_event` is for the
few written from Python. Reading streams: :mod:`tasks.state.streams`.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis
from pydantic import BaseModel, ConfigDict

#: Envelope version; bump on a breaking change of the envelope or of a type's data.
SCHEMA_VERSION = 1

#: Every event type the service writes, with what it means.
EVENT_TYPES: dict[str, str] = {
    "sched.request.received": "a request was accepted (data: request, digest)",
    "sched.request.duplicate": "a request id was submitted again; no new decision",
    "sched.request.conflict": "a known request id was submitted with another request (data: digests)",
    "sched.decision.made": "the core decided (data: inputs digest, chain, outcome summary)",
    "sched.reservation.booked": "claims booked atomically; cluster change (data: instance)",
    "sched.reservation.conflicted": "the cluster moved under the decision (data: GPUs short)",
    "sched.request.retried": "a new decision attempt was queued (data: attempt, delay_ms)",
    "sched.result.published": "a result entry was added to the results stream",
    "sched.request.rejected": "bad input: a rejected result naming the field",
    "sched.request.parked": "no placement now; waiting for a cluster change (data: reasons)",
    "sched.request.woken": "a cluster change may unblock the parked request",
    "sched.request.redriven": "the outbox watchdog sent a request's step again (data: redrives)",
    "sched.request.dead_lettered": "the redelivery guard gave up on a message",
    "sched.request.cancelled": "a request was withdrawn (data: state before, by, released booking)",
    "sched.cluster.applied": "a snapshot replaced the cluster; cluster change (data: digest)",
    "sched.worker.upserted": "a worker was added or changed; cluster change (data: row)",
    "sched.worker.removed": "a worker left, releasing its instances; cluster change",
    "sched.instance.released": "instances released; cluster change (data: released)",
    "sched.instance.rescheduled": "an instance on a lost worker got a new request",
    "sched.instance.lost": "a control-plane instance was lost; it must be resubmitted",
    "sched.worker.health": "a worker's readiness changed (hysteresis clocks)",
    "sched.reschedule.suspended": "too many workers down at once: rescheduling postponed",
    "sched.reschedule.resumed": "rescheduling off lost workers goes on again (data: down, workers)",
    "sched.cluster.event_rejected": "a cluster event was invalid (data: error, field)",
    "sched.ledger.overbooked": "a worker shrank below what is booked on it",
    "sched.redis.out_of_memory": "Redis refused writes (maxmemory) for a while; reported once it was over",
    "sched.data.lost": "Redis lost the service's data (wiped, replaced, rolled back): nothing is decided",
    "sched.data.recovered": "a recovery rebuilt the state (snapshot, bookings) under a new data generation",
    "sched.request.expired": "a request parked longer than parked_ttl_s got its final result",
    "sched.audit.checkpointed": "the cluster was checkpointed at this version (data: version)",
}


def utc_now_iso() -> str:
    """Current UTC time, ISO-8601 with microseconds and a ``Z`` suffix."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_source() -> str:
    """``<host>:<pid>`` of this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True, slots=True)
class EventMeta:
    """The envelope parts a producer fixes before a Lua script writes the event(s)."""

    event_id: str
    time: str
    source: str

    @classmethod
    def new(cls, source: str | None = None) -> EventMeta:
        """Fresh id and time."""
        return cls(uuid.uuid4().hex, utc_now_iso(), source or default_source())

    def argv(self) -> list[str]:
        """``[event_id, time, source]`` — the order every Lua script expects."""
        return [self.event_id, self.time, self.source]


class Event(BaseModel):
    """One audit event as read back from the stream."""

    model_config = ConfigDict(frozen=True)

    stream_id: str
    schema_version: int
    type: str
    event_id: str
    time: str
    source: str
    request_id: str | None
    cluster_version: int | None
    data: dict[str, Any]

    @classmethod
    def from_entry(cls, stream_id: str, fields: Mapping[str, str]) -> Event:
        """Parse a stream entry (``decode_responses=True`` fields)."""
        version = fields.get("cluster_version") or ""
        return cls(
            stream_id=stream_id,
            schema_version=int(fields.get("schema_version", "1")),
            type=fields["type"],
            event_id=fields.get("event_id", ""),
            time=fields.get("time", ""),
            source=fields.get("source", ""),
            request_id=fields.get("request_id") or None,
            cluster_version=int(version) if version else None,
            data=json.loads(fields.get("data") or "{}"),
        )


def dumps(value: Any) -> str:
    """Compact JSON with sorted keys (stable bytes for digests and for tests)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def embedded_json(text: str) -> Any:
    """A JSON text (e.g. the canonical request) embedded as JSON, not as a string, in event data."""
    return json.loads(text)


def event_fields(
    event_type: str,
    data: Mapping[str, Any],
    *,
    request_id: str | None = None,
    cluster_version: int | None = None,
    meta: EventMeta | None = None,
) -> dict[str, str]:
    """The stream fields of one event written from Python."""
    meta = meta or EventMeta.new()
    return {
        "schema_version": str(SCHEMA_VERSION),
        "type": event_type,
        "event_id": meta.event_id,
        "time": meta.time,
        "source": meta.source,
        "request_id": request_id or "",
        "cluster_version": "" if cluster_version is None else str(cluster_version),
        "data": dumps(dict(data)),
    }


def append_event(
    client: redis.Redis,
    stream: str,
    event_type: str,
    data: Mapping[str, Any],
    *,
    request_id: str | None = None,
    cluster_version: int | None = None,
) -> str:
    """XADD one event written from Python (no trimming here). Returns the entry id."""
    fields = event_fields(
        event_type, data, request_id=request_id, cluster_version=cluster_version
    )
    return str(client.xadd(stream, fields))  # type: ignore[arg-type]
