"""Reading Redis Streams: pages, whole streams, consumer groups.

The service writes three streams a control plane reads: ``gpusched:results``
(one entry per published result: ``request_id``, ``result`` — the Contract 1
JSON —, ``status``, ``terminal`` — ``1`` for scheduled/rejected, ``0`` for the
one-time ``unschedulable`` notice of a parked request — and ``seq``),
``gpusched:events`` (the audit log, :mod:`tasks.base.events`) and
``gpusched:deadletter``. A client doing blocking reads needs a socket timeout
above its longest block (:func:`tasks.state.context.redis_client`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

import redis

from tasks.state.scripts import Scripts

#: Pause between two looks while a consumer group waits for acknowledged entries (s).
ACK_POLL_S = 0.05


def stream_id_key(entry_id: str) -> tuple[int, int]:
    """A stream id as a sortable pair (``ms-seq``)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def read_range(
    client: redis.Redis, stream: str, start: str = "-", count: int = 1000
) -> list[tuple[str, dict[str, str]]]:
    """One page of entries from ``start`` (inclusive; prefix ``(`` for exclusive)."""
    entries = cast(list[tuple[str, dict[str, str]]], client.xrange(stream, min=start, max="+", count=count))
    return [(str(entry_id), dict(fields)) for entry_id, fields in entries]


def iter_stream(client: redis.Redis, stream: str, start: str = "-", page: int = 1000) -> Any:
    """Yield every ``(id, fields)`` from ``start`` to the end, paging with exclusive ranges."""
    cursor = start
    while True:
        entries = read_range(client, stream, cursor, page)
        yield from entries
        if len(entries) < page:
            return
        cursor = f"({entries[-1][0]}"


# ---------------------------------------------------------------- consumer groups
def ensure_group(client: redis.Redis, stream: str, group: str, start: str = "0") -> None:
    """Create the consumer group (and the stream) if missing; idempotent."""
    try:
        client.xgroup_create(stream, group, id=start, mkstream=True)
    except redis.ResponseError as error:
        if "BUSYGROUP" not in str(error):
            raise


def read_group(
    client: redis.Redis,
    stream: str,
    group: str,
    consumer: str,
    *,
    count: int = 100,
    block_ms: int | None = None,
    acknowledged: str | None = None,
) -> list[tuple[str, dict[str, str]]]:
    """New entries for ``consumer`` (``>``); the client's socket timeout must exceed ``block_ms``.

    Args:
        acknowledged: the deployment's acknowledged position key (``Keys.acked``) when it waits
            for replicas (``replicas_required`` ≥ 1, the default through Sentinel): only entries
            a replica holds are handed out (``group_read.lua``), so a failover cannot take back
            an entry a consumer was given; a wait for one polls every :data:`ACK_POLL_S`.
            None: plain ``XREADGROUP`` (a deployment without replicas).
    """
    if acknowledged is None:
        reply = client.xreadgroup(group, consumer, {stream: ">"}, count=count, block=block_ms)
        return _flatten_read(reply)
    scripts = Scripts(client)
    deadline = time.monotonic() + (block_ms or 0) / 1000
    while True:
        reply = scripts.run("group_read", [stream, acknowledged], [group, consumer, count])
        entries = _flatten_raw_read(reply)
        if entries or time.monotonic() >= deadline:
            return entries
        time.sleep(ACK_POLL_S)


def claim_stale(
    client: redis.Redis,
    stream: str,
    group: str,
    consumer: str,
    *,
    min_idle_ms: int,
    count: int = 100,
) -> list[tuple[str, dict[str, str]]]:
    """Take over entries a crashed consumer read but never acknowledged (``XAUTOCLAIM``).

    Walks the whole pending list; entries trimmed away meanwhile are skipped.
    """
    claimed: list[tuple[str, dict[str, str]]] = []
    cursor = "0-0"
    while True:
        reply = client.xautoclaim(
            stream, group, consumer, min_idle_time=min_idle_ms, start_id=cursor, count=count
        )
        cursor = str(reply[0])
        for entry_id, fields in reply[1]:
            if fields is not None:
                claimed.append((str(entry_id), dict(fields)))
        if cursor == "0-0":
            return claimed


def ack(client: redis.Redis, stream: str, group: str, ids: Sequence[str]) -> int:
    """Acknowledge processed entries."""
    if not ids:
        return 0
    return int(client.xack(stream, group, *ids))


def _flatten_read(reply: Any) -> list[tuple[str, dict[str, str]]]:
    """Flatten an XREAD/XREADGROUP reply (RESP2 shape: ``[[stream, [(id, fields), ...]], ...]``)."""
    entries: list[tuple[str, dict[str, str]]] = []
    for _, stream_entries in reply or ():
        for entry_id, fields in stream_entries:
            entries.append((str(entry_id), dict(fields or {})))
    return entries


def _flatten_raw_read(reply: Any) -> list[tuple[str, dict[str, str]]]:
    """Entries a script returned as XRANGE replies (no client parsing: fields are a flat list)."""
    entries: list[tuple[str, dict[str, str]]] = []
    for entry_id, flat in reply or ():
        pairs = [str(item) for item in flat or ()]
        entries.append((str(entry_id), dict(zip(pairs[::2], pairs[1::2], strict=True))))
    return entries


def read_new(
    client: redis.Redis, stream: str, last_id: str, *, count: int = 100, block_ms: int | None = None
) -> list[tuple[str, dict[str, str]]]:
    """Entries after ``last_id`` (plain XREAD, no group)."""
    reply = client.xread({stream: last_id}, count=count, block=block_ms)
    return _flatten_read(reply)
