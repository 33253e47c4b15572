"""Bounded audit state: checkpoints, trimming behind them, the archive, old snapshots, parked requests.

One pass (:func:`maintain`, run by every worker node's drainer, by one node at
a time per ``maintenance_interval_s``):

1. **scan** the audit events logged since the last pass: count them and note
   which stored snapshot each ``sched.cluster.applied`` references
   (``gpusched:audit:snapshot_refs``, digest → last reference);
2. **checkpoint** (:mod:`tasks.audit.checkpoints`) once ``audit_checkpoint_every``
   events were logged since the last one;
3. **trim** behind the oldest of the ``audit_checkpoints_kept`` newest
   checkpoints: the events before its position are first written to
   ``audit_archive_dir`` (JSON lines, when set), then removed (``XTRIM MINID``);
   older checkpoints and every snapshot no remaining event references go too;
   ``gpusched:audit:state`` records where the log now starts (replay starts
   from that checkpoint; :mod:`tasks.audit.archive` describes the files);
4. **expire** requests parked longer than ``parked_ttl_s``: they get their
   final result (``unschedulable``, terminal) and their record expires like
   any finished one (``expire_parked.lua``).

Every step is safe to repeat and to interrupt: the scan position, the
checkpoint index and the trim point are written after the work they follow.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tasks.audit.archive import entries_before, write_archive
from tasks.audit.checkpoints import checkpoint_positions, take_checkpoint
from tasks.base.events import dumps
from tasks.state.context import Runtime
from tasks.state.fold import CLUSTER_APPLIED
from tasks.state.scripts import ScriptCall
from tasks.state.streams import read_range, stream_id_key

#: Events read per round trip while scanning or archiving.
PAGE = 1000
#: Events scanned at most per pass (the next pass goes on).
SCAN_LIMIT = 200_000


def maintain(rt: Runtime, *, force: bool = False) -> dict[str, Any]:
    """One retention pass, unless another node ran one within ``maintenance_interval_s``.

    Args:
        force: run even if the interval has not passed (the CLI).

    Returns:
        What was done: ``scanned``, ``checkpoint`` (version or None), ``trimmed``
        (events removed), ``snapshots_deleted``, ``expired`` (request ids); ``{}`` when skipped.
    """
    interval_ms = max(int(rt.settings.maintenance_interval_s * 1000), 1)
    if not rt.client.set(rt.keys.maintenance_lock, "1", nx=not force, px=interval_ms):
        return {}
    scanned = scan(rt)
    every = rt.settings.audit_checkpoint_every
    checkpoint = None
    if every and int(rt.client.hget(rt.keys.audit_state, "since_checkpoint") or 0) >= every:
        checkpoint = checkpoint_now(rt)
    trimmed, deleted = trim(rt)
    return {"scanned": scanned, "checkpoint": checkpoint, "trimmed": trimmed,
            "snapshots_deleted": deleted, "expired": expire_parked(rt)}


def checkpoint_now(rt: Runtime) -> int:
    """Take a checkpoint and restart the count of events since the last one; returns its version."""
    taken = take_checkpoint(rt.partition)
    rt.client.hset(rt.keys.audit_state, "since_checkpoint", 0)
    return taken.version


def scan(rt: Runtime, limit: int = SCAN_LIMIT) -> int:
    """Note the events logged since the last scan (count, snapshot references); returns how many."""
    k = rt.keys
    cursor = str(rt.client.hget(k.audit_state, "scanned") or "0-0")
    total = 0
    while total < limit:
        entries = read_range(rt.client, k.events, f"({cursor}", PAGE)
        if not entries:
            break
        refs = {
            json.loads(fields.get("data") or "{}").get("digest", ""): _ms(entry_id)
            for entry_id, fields in entries if fields.get("type") == CLUSTER_APPLIED
        }
        cursor = entries[-1][0]
        total += len(entries)
        pipe = rt.client.pipeline(transaction=True)
        if refs:
            pipe.zadd(k.snapshot_refs, {digest: ms for digest, ms in refs.items() if digest})
        pipe.hset(k.audit_state, "scanned", cursor)
        pipe.hincrby(k.audit_state, "since_checkpoint", len(entries))
        pipe.execute()
        if len(entries) < PAGE:
            break
    return total


def trim(rt: Runtime) -> tuple[int, int]:
    """Trim the log behind the oldest checkpoint kept (archiving it first); returns
    (events removed, snapshots deleted). Nothing when ``audit_checkpoints_kept`` is 0.

    Scans first (:func:`scan`): a snapshot is deleted only once every event up to the
    trim point has been scanned for references.
    """
    scan(rt)
    kept = rt.settings.audit_checkpoints_kept
    k = rt.keys
    positions = checkpoint_positions(rt.client, k)
    if kept == 0 or not positions:
        return 0, 0
    versions = list(positions)
    oldest = versions[-kept] if len(versions) >= kept else versions[0]
    point = positions[oldest]
    state = rt.client.hmget(k.audit_state, "scanned", "trimmed_at")
    scanned, trimmed_at = (str(v) if v else "0-0" for v in state)
    if _key(point) <= _key(trimmed_at) or _key(scanned) < _key(point):
        return 0, 0  # nothing new to trim, or the scan has not reached the point yet
    stale = [str(d) for d in rt.client.zrangebyscore(k.snapshot_refs, "-inf", f"({_ms(point)}")]
    if rt.settings.audit_archive_dir:
        documents = {d: str(text) for d, text in zip(stale, _get_all(rt, stale), strict=True) if text}
        entries = entries_before(rt.client, k.events, point)
        write_archive(entries, Path(rt.settings.audit_archive_dir), rt.settings.cluster or "", documents)
    removed = int(rt.client.xtrim(k.events, minid=point, approximate=False))
    pipe = rt.client.pipeline(transaction=True)
    pipe.hset(k.audit_state, mapping={"trimmed_at": point, "trimmed_version": oldest})
    for version in versions[: versions.index(oldest)]:
        pipe.delete(k.checkpoint(version))
        pipe.hdel(k.checkpoints, str(version))
    for digest in stale:  # every reference was before the trim point (strictly: same ms is kept)
        pipe.delete(k.snapshot(digest))
    if stale:
        pipe.zrem(k.snapshot_refs, *stale)
    pipe.execute()
    return removed, len(stale)


def _get_all(rt: Runtime, digests: list[str]) -> list[Any]:
    pipe = rt.client.pipeline(transaction=False)
    for digest in digests:
        pipe.get(rt.keys.snapshot(digest))
    return list(pipe.execute())


def expire_parked(rt: Runtime) -> list[str]:
    """Finish the requests parked longer than ``parked_ttl_s`` (0: never); returns their ids."""
    ttl_ms = int(rt.settings.parked_ttl_s * 1000)
    if ttl_ms <= 0:
        return []
    now = rt.partition.now_ms()
    expired: list[str] = []
    for request_id, raw in rt.parked.entries().items():
        entry = json.loads(raw)
        if now - int(entry.get("parked_ms") or 0) < ttl_ms:
            continue
        outcome = rt.partition.call(_expire_call(rt, request_id, int(entry.get("seq") or 0), now))
        if outcome == "expired":
            expired.append(request_id)
    return expired


def _expire_call(rt: Runtime, request_id: str, seq: int, now_ms: int) -> ScriptCall[str]:
    p = rt.partition
    k = p.keys
    keys = [k.request(request_id), k.parked, k.results, k.events, k.outbox]
    data = dumps({"seq": seq, "parked_ttl_s": rt.settings.parked_ttl_s})
    args = [*p.meta().argv(), request_id, seq, p.settings.results_maxlen, p.settings.request_ttl_s,
            now_ms, data]
    return ScriptCall("expire_parked", keys, args, lambda reply: str(reply[0]))


_key = stream_id_key


def _ms(entry_id: str) -> int:
    return _key(entry_id)[0]
