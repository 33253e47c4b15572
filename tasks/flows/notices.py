"""Notices on the results stream a control plane follows: released placements, suspended rescheduling.

Besides one terminal result per request (and the one-time ``unschedulable``
notice of a parked request), ``gpusched:results`` carries non-terminal notices
(``terminal = 0``) so that a control plane reading only that stream can follow
a placement through its life:

* ``released`` (``request_id`` = the request whose published placement was
  released; fields ``reason``, and ``reschedule_of`` if it was itself a
  move): written by the release's follow-up before any rescheduling, so the
  replacement's result (``<id>~<n>``, carrying ``reschedule_of``) comes after
  it (``announce_released.lua``, once per booking);
* ``reschedule_suspended`` / ``reschedule_resumed`` (``request_id`` ""):
  rescheduling off lost workers stopped because more than
  ``max_unreachable_fraction`` of the workers are down, or started again
  (``reschedule_notice.lua``, once per transition).
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler_core import Worker
from tasks.base.events import dumps
from tasks.base.rows import Released
from tasks.flows.vanished import outage_share
from tasks.state.context import Runtime
from tasks.state.scripts import ScriptCall


def announce_released(rt: Runtime, released: Sequence[Released], reason: str, *, rescheduling: bool) -> int:
    """Announce each released gpusched placement once (idempotent); returns how many were announced."""
    items = [item for item in released if item.meta.source == "gpusched" and item.meta.request_id]
    if not items:
        return 0
    batch = rt.partition.batch()
    k = rt.keys
    pending = []
    for item in items:
        rid = str(item.meta.request_id)
        marker = f"{item.key}@{item.meta.order[0]}"
        pending.append(batch.script(_script_call(
            "announce_released", [k.request(rid), k.results],
            [rid, item.key, marker, reason, "1" if rescheduling else "0", rt.settings.results_maxlen],
        )))
    batch.execute()
    return sum(1 for reply in pending if reply.value)


def rescheduling_suspended(rt: Runtime, workers: Sequence[Worker]) -> bool:
    """Whether more than ``max_unreachable_fraction`` of the workers are down or recently vanished.

    A worker that left the cluster (dropped by a snapshot, removed) within
    ``unreachable_grace_s`` counts as down (:func:`tasks.flows.vanished.outage_share`).
    """
    down, vanished, total = outage_share(rt, workers)
    return bool(total) and (down + vanished) / total > rt.settings.max_unreachable_fraction


def announce_suspension(rt: Runtime, workers: Sequence[Worker], *, suspended: bool) -> bool:
    """Record that rescheduling is (or is no longer) suspended; True when this changed it."""
    down, vanished, total = outage_share(rt, workers)
    notice = dumps({
        "status": "reschedule_suspended" if suspended else "reschedule_resumed",
        "down": down, "vanished": vanished, "workers": total,
        "max_unreachable_fraction": rt.settings.max_unreachable_fraction,
    })
    k = rt.keys
    mode = "suspend" if suspended else "resume"
    reply = rt.partition.run(
        "reschedule_notice", [k.reschedule_suspended, k.results, k.events],
        [*rt.partition.meta().argv(), mode, notice, rt.settings.results_maxlen],
    )
    return bool(reply)


def resume_if_recovered(rt: Runtime) -> bool:
    """After workers came back: announce the resume if rescheduling was suspended and no longer is.

    One ``EXISTS`` when nothing is suspended (the common case).
    """
    if not rt.client.exists(rt.keys.reschedule_suspended):
        return False
    workers = rt.mirror.sync().worker_list()
    if rescheduling_suspended(rt, workers):
        return False
    return announce_suspension(rt, workers, suspended=False)


def _script_call(name: str, keys: list[str], args: list[object]) -> ScriptCall[str]:
    return ScriptCall(name, keys, list(args), str)
