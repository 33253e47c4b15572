"""Withdrawing a request (``gpusched cancel``, ``ServiceClient.cancel``, the ``request_cancelled`` event).

One Lua step (``cancel.lua``) finishes a request that is not finished yet —
queued, deciding, decided, retrying, parked, woken, or booked but not yet
published — with its one terminal result, status ``cancelled``; every later
step of its decision refuses on its own guard, so a cancelled request never
books, and a booking made but not yet published is released in the same step.
A request whose placement was already published has its booking released
instead (its terminal result stays ``scheduled``; the results stream gets a
``released`` notice). A request whose booking was moved to another request
(``<id>~<n>``, after its worker was lost) is followed: the request that
replaced it is cancelled too. A release wakes the parked requests the freed
GPUs could serve (the script records that follow-up with the release).
"""

from __future__ import annotations

from typing import Any

from scheduler_core import ScheduleResult
from tasks.base.digests import sha256_hex
from tasks.flows.followups import run_followup
from tasks.state.context import Runtime

#: Outcomes of one cancel, per request.
CANCELLED = "cancelled"  # was not finished: its terminal result is "cancelled"
RELEASED = "released"  # its placement was published: the booking is released
ALREADY_CANCELLED = "already_cancelled"
FINISHED = "finished"  # done and holding nothing: nothing to withdraw
UNKNOWN = "unknown"  # no such request (or its record expired)
#: Longest chain of moved bookings a cancel follows (each move adds one ``~n``).
MAX_FOLLOWED_MOVES = 64


def cancelled_result(request_id: str) -> str:
    """The terminal result JSON of a cancelled request (Contract 1 shape, status ``cancelled``)."""
    return ScheduleResult(request_id=request_id, status="cancelled").model_dump_json()


def cancel_request(rt: Runtime, request_id: str, *, by: str = "client") -> dict[str, Any]:
    """Withdraw ``request_id`` exactly once, following its moved booking (idempotent).

    Args:
        by: who cancels (``client``, ``cluster_event``, ``instance_deleted``);
            recorded in the events and used as the release reason.

    Returns:
        ``{"request_id", "status", "state"}``: ``status`` is ``cancelled``,
        ``released``, ``already_cancelled``, ``finished`` or ``unknown``;
        ``state`` is the record's state before (``done`` when it was done), or
        for ``finished`` the final status it had. A released booking adds the
        cluster ``version`` it produced and the parked requests it ``woken``.
        When the booking had moved, ``moved_to`` holds the same summary for
        the request that replaced it.
    """
    summary = _cancel_one(rt, request_id, by)
    tail = summary
    for _ in range(MAX_FOLLOWED_MOVES):
        successor = tail.pop("_moved_to", "")
        if not successor:
            break
        tail["moved_to"] = _cancel_one(rt, successor, by)
        tail = tail["moved_to"]
    tail.pop("_moved_to", None)
    return summary


def _cancel_one(rt: Runtime, request_id: str, by: str) -> dict[str, Any]:
    p = rt.partition
    k = rt.keys
    s = rt.settings
    meta = p.meta()
    result = cancelled_result(request_id)
    reply = p.run(
        "cancel",
        [
            k.request(request_id), k.results, k.events, k.parked, k.outbox, k.version, k.epoch,
            k.booked, k.instances, k.instance_meta, k.claims, k.changes, k.followups, k.followup_jobs,
        ],
        [
            *meta.argv(), request_id, result, sha256_hex(result), s.results_maxlen, s.request_ttl_s,
            p.now_ms(), s.changes_maxlen, p.lease_deadline_ms(), by,
        ],
    )
    status = str(reply[0])
    summary: dict[str, Any] = {"request_id": request_id, "status": status}
    if status == UNKNOWN:
        return summary
    summary["state"] = reply[1]
    version = reply[2] if status == RELEASED else reply[3] if status == CANCELLED else ""
    if version:  # a booking was released: wake what the freed GPUs could serve
        summary["version"] = int(version)
        summary["woken"] = run_followup(rt, meta.event_id)["woken"]
    if status == FINISHED and reply[2]:
        summary["_moved_to"] = reply[2]
    return summary
