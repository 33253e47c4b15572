"""Workers that left the cluster: the mass-outage guard counts them, their bookings wait behind it.

A worker vanishes when a snapshot no longer lists it or a ``worker_removed``
event removes it (``gpusched:cluster:vanished``: id → when; a worker listed or
added again is not vanished any more). For ``unreachable_grace_s`` after it
left, a vanished worker counts as down for the mass-outage guard
(:func:`outage_share`), so a truncated snapshot that drops half the cluster is
held back like half the cluster going unreachable.

The bookings a snapshot dropped with its vanished workers are rescheduled by
the snapshot's follow-up (:mod:`tasks.flows.followups`) — unless the guard
holds (more than ``max_unreachable_fraction`` of the workers down or vanished)
and the removal was not confirmed (``allow_removal``): then the follow-up
keeps them, re-armed every ``unreachable_grace_s`` with
``sched.reschedule.suspended``; a booking whose workers are all listed again
by then is booked again where it was (:func:`rebook_returned`,
``restore_booking.lua``) instead of moved.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from scheduler_core import Worker
from tasks.base.events import dumps
from tasks.base.logging import get_logger
from tasks.state.cluster_store import Booking
from tasks.state.context import Runtime
from tasks.state.ledger import decode_amounts

log = get_logger(__name__)

#: The follow-up reason of a snapshot's dropped bookings (``cluster_apply.lua``).
SNAPSHOT_GONE = "worker_gone_in_snapshot"


def recently_vanished(rt: Runtime) -> int:
    """Workers that left within ``unreachable_grace_s`` (older entries are forgotten here)."""
    entries = rt.client.hgetall(rt.keys.vanished)
    if not entries:
        return 0
    horizon = rt.partition.now_ms() - int(rt.settings.unreachable_grace_s * 1000)
    stale = [wid for wid, since in entries.items() if int(since) < horizon]
    if stale:
        rt.client.hdel(rt.keys.vanished, *stale)
    return len(entries) - len(stale)


def outage_share(rt: Runtime, workers: Sequence[Worker]) -> tuple[int, int, int]:
    """(workers not ready, recently vanished workers, workers + recently vanished)."""
    vanished = recently_vanished(rt)
    down = sum(1 for w in workers if w.state != "ready")
    return down, vanished, len(workers) + vanished


def rebook_returned(rt: Runtime, items: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Book again the dropped bookings whose workers are all listed again; returns the others."""
    workers = rt.mirror.sync().workers
    return [item for item in items if not _rebooked(rt, item, workers)]


def _rebooked(rt: Runtime, item: Mapping[str, Any], workers: Mapping[int, Worker]) -> bool:
    """Book a dropped booking again if all its workers are listed again (True when it is booked)."""
    meta = item.get("meta") or {}
    rid = meta.get("rid")
    occupied = [int(w) for w in meta.get("w") or ()]
    if not rid or not item.get("row") or not occupied or any(w not in workers for w in occupied):
        return False
    request_json, digest, result = rt.client.hmget(rt.keys.request(rid), "request", "digest", "result")
    if not request_json:
        return False
    order_free = {k: v for k, v in meta.items() if k not in ("v", "i")}
    data = dumps({"instance_key": item["key"], "row": json.loads(item["row"]), "meta": order_free,
                  "claims": dict(sorted(_claims(item.get("claims")).items())), "request_id": rid,
                  "restored": True})
    booking = Booking(item["key"], item["row"], dumps(order_free), item.get("claims") or "[]", data)
    outcome, _, _ = rt.cluster.restore_booking(
        str(rid), str(request_json), str(digest or ""), booking, str(result or "")
    )
    log.info("booking_restored", request_id=rid, outcome=outcome)
    return True


def _claims(encoded: str | None) -> dict[str, int]:
    return decode_amounts(encoded or "")
