"""A cluster change's follow-up: reschedule what it released, expire records, wake parked requests.

The Lua script that applies a cluster change records its follow-up work under
the change's event id (``gpusched:followups``, ``gpusched:followup_jobs``):

* announce each released placement on the results stream (``released``,
  :mod:`tasks.flows.notices`), before its replacement exists;
* reschedule the gpusched bookings it released (a new request per booking,
  :func:`reschedule_released`);
* expire the records of released requests (the dedupe window starts);
* wake the parked requests the change could unblock (:mod:`tasks.state.parking`).
  Freed capacity wakes only the requests a freed GPU can take
  (:func:`tasks.state.parking.wake_plan`): requests whose floor a freed GPU
  reaches, and of those at most as many as the freed GPUs hold, oldest parked
  first. When some had to wait, the follow-up is kept, reduced to its wake,
  and runs again after ``wake_recheck_s``: the requests woken first may not
  have used the GPUs, and each run wakes only requests decided before the
  change, so it ends once the GPUs are taken or nobody is left.

The caller runs the follow-up at once (:func:`run_followup`) and deletes it.
If the caller dies first, or the script's reply was lost and redis-py's retry
found nothing left to change, or the event is redelivered after it was
applied, the follow-up is still there: the drainer runs it once it is due
(``outbox_lease_s``). Every part is idempotent: a booking is rescheduled
once (the new request records which booking it replaces), expiring twice is
harmless, and waking only moves requests still parked at the seq it saw.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler_core import ClusterChange, canonical_json
from tasks.base.digests import sha256_hex
from tasks.base.events import append_event, dumps
from tasks.base.rows import Released, json_list, released_items
from tasks.flows import metrics
from tasks.flows.enqueue import enqueue_many
from tasks.flows.notices import announce_released, announce_suspension, rescheduling_suspended
from tasks.flows.vanished import SNAPSHOT_GONE, outage_share, rebook_returned
from tasks.state.context import Runtime
from tasks.state.fold import ClusterFold
from tasks.state.parking import Change, describe, gpu_room, wake_plan
from tasks.state.records import Accepted
from tasks.state.scripts import Pending, ScriptCall


def run_followup(rt: Runtime, followup_id: str) -> dict[str, list[str]]:
    """Do a cluster change's recorded follow-up work, then delete it (idempotent).

    Returns:
        ``{"woken": [...], "rescheduled": [...]}`` (empty if there was nothing to do).
    """
    raw = rt.client.hget(rt.keys.followup_jobs, followup_id)
    rescheduled: list[str] = []
    woken: list[str] = []
    later: list[Any] = []
    if raw is not None:
        job = _guarded(rt, followup_id, json.loads(raw))
        if job is None:  # held back: re-armed, still recorded
            return {"woken": wake(rt, json.loads(raw).get("wake")), "rescheduled": []}
        released = released_items(job.get("released"))
        # before any rescheduling: the old placement's "released" precedes its replacement's result
        announce_released(rt, released, str(job.get("reason")), rescheduling=bool(job.get("reschedule")))
        if job.get("reschedule"):
            rescheduled = reschedule_released(rt, released, str(job.get("reason")))
        _expire_records(rt, released)
        woken, later = _wake(rt, job.get("wake"))
    pipe = rt.client.pipeline(transaction=True)
    if later:  # the same id, reduced to the wake that must be checked again
        job = {"reason": "wake_recheck", "released": [], "reschedule": False, "wake": later}
        pipe.hset(rt.keys.followup_jobs, followup_id, dumps(job))
        pipe.zadd(rt.keys.followups, {followup_id: rt.partition.now_ms() + _recheck_ms(rt)})
    else:
        pipe.hdel(rt.keys.followup_jobs, followup_id)
        pipe.zrem(rt.keys.followups, followup_id)
    pipe.execute()
    return {"woken": woken, "rescheduled": rescheduled}


def _guarded(rt: Runtime, followup_id: str, job: dict[str, Any]) -> dict[str, Any] | None:
    """A snapshot's dropped bookings, behind the mass-outage guard (:mod:`tasks.flows.vanished`).

    Bookings whose workers are listed again are booked again; the rest go on
    to be rescheduled, or — while more than ``max_unreachable_fraction`` of the
    workers are down or vanished and the removal was not confirmed — wait:
    the job is re-armed ``unreachable_grace_s`` later (None is returned).
    """
    if not (job.get("reschedule") and job.get("reason") == SNAPSHOT_GONE and json_list(job.get("released"))):
        return job
    waiting = rebook_returned(rt, json_list(job.get("released")))
    job = {**job, "released": waiting}
    workers = rt.mirror.sync().worker_list()
    if not waiting or job.get("removal_confirmed") or not rescheduling_suspended(rt, workers):
        return job
    due = rt.partition.now_ms() + int(rt.settings.unreachable_grace_s * 1000)
    pipe = rt.client.pipeline(transaction=True)
    pipe.hset(rt.keys.followup_jobs, followup_id, json.dumps(job))
    pipe.zadd(rt.keys.followups, {followup_id: due})
    pipe.execute()
    down, vanished, total = outage_share(rt, workers)
    append_event(rt.client, rt.keys.events, "sched.reschedule.suspended", {
        "reason": "workers_vanished", "down": down, "vanished": vanished, "workers": total,
        "bookings": len(waiting),
    })
    announce_suspension(rt, workers, suspended=True)
    return None


def _recheck_ms(rt: Runtime) -> int:
    return int(rt.settings.wake_recheck_s * 1000)


def _expire_records(rt: Runtime, released: Sequence[Released]) -> None:
    pipe = rt.client.pipeline(transaction=False)
    for item in released:
        if item.meta.request_id:
            pipe.expire(rt.keys.request(item.meta.request_id), rt.settings.request_ttl_s)
    pipe.execute()


def wake(rt: Runtime, facts: Any) -> list[str]:
    """Wake the parked requests a change could unblock and queue their new decisions.

    Args:
        facts: the change's wake-relevant facts, ``[{kind, workers: [ids], version?}]``
            (workers are read from the current cluster: one that is gone or
            no longer ready serves nobody).
    """
    return _wake(rt, facts)[0]


def _wake(rt: Runtime, facts: Any) -> tuple[list[str], list[Any]]:
    """:func:`wake`, and the facts to check again later (requests deferred for lack of slots)."""
    facts = json_list(facts)
    if not facts:
        return [], []
    fold = rt.mirror.sync()
    changes = [_change(fold, fact) for fact in facts]
    plan = wake_plan(rt.parked.entries(), changes, rt.chain.chain)
    due = rt.partition.lease_deadline_ms()
    woken = rt.parked.wake(plan.targets, describe(changes), due)
    metrics.count_wakeups(len(woken))
    enqueue_many(rt, [(request_id, seq, 0) for request_id, seq in woken])  # a storm: in batches
    later = [fact for fact in facts if fact.get("version")] if plan.deferred else []
    return [request_id for request_id, _ in woken], later


def _change(fold: ClusterFold, fact: Any) -> Change:
    """A recorded wake fact on the current cluster (freed capacity: with each freed GPU's share
    and bytes now, after what was booked since).

    Only the GPUs the change freed (the fact's ``gpus``) are offered: the room of the
    others did not grow by this change (when another change grew it, that change's own fact
    offers it), so a candidate this change makes possible uses a freed GPU. A fact without
    ``gpus`` (recorded before they were, or with none) offers every GPU of its workers.
    """
    kind = str(fact["kind"])
    workers = tuple(fold.workers[w] for w in json_list(fact.get("workers")) if w in fold.workers)
    version = int(fact.get("version") or 0)
    if kind != ClusterChange.CAPACITY_FREED.value:
        return Change(kind, workers, version)
    held = {worker.id: fold.instances_on(worker.id) for worker in workers}
    freed = json_list(fact.get("gpus"))
    only = {str(key) for key in freed} if freed else None
    room = [gpu for worker in workers for gpu in gpu_room(worker, held[worker.id], only)]
    shares = tuple((gpu_type, share) for gpu_type, share, _ in room)
    return Change(kind, workers, version, shares, tuple(free for _, _, free in room))


def reschedule_released(rt: Runtime, released: Sequence[Released], reason: str) -> list[str]:
    """Give every released gpusched booking a new request; report control-plane instances as lost.

    The new request id is ``<old request id>~<n>`` (n = how often it moved,
    or the next free number when a request already has that id), so the
    control plane can correlate; the new request waits parked if it fits
    nowhere (a pinned model waits for its own GPUs). Idempotent: the new
    request records the booking it replaces (``reschedule_of``), and a
    booking that already has one is not rescheduled again.

    A storm's bookings are recorded together (:func:`_reschedule_all`: a few
    round trips for all of them, not five per booking), then sent in batches.
    """
    new_ids: list[str] = []
    fresh: list[tuple[str, int, int]] = []
    for new_id, recorded in _reschedule_all(rt, released, reason):
        new_ids.append(new_id)
        fresh += [(new_id, 0, 0)] if recorded else []
    enqueue_many(rt, fresh)  # a lost worker's bookings: decided in batches
    return new_ids


@dataclass(frozen=True, slots=True)
class _Successor:
    """A released gpusched booking and the request that is to replace it."""

    item: Released
    old_id: str
    new_id: str
    origin: str
    request_json: str


def _reschedule_all(rt: Runtime, released: Sequence[Released], reason: str) -> list[tuple[str, bool]]:
    """:func:`_reschedule_one` for every item, in three round trips when each booking's first
    successor id is free (the usual case): read the old records and the ids, accept every new
    request, note ``moved_to``. An item the batch cannot settle (its id taken by another
    request) takes :func:`_reschedule_one`'s path alone. Returns ``(new id, recorded now)``
    in the order of ``released``."""
    successors, lost = _successors(rt, released)
    for item in lost:
        _report_lost(rt, item, reason)
    batch = rt.partition.batch()
    replies = [(s, batch.command(_state_and_origin, "HMGET", rt.keys.request(s.new_id), "state",
                                 "reschedule_of")) for s in successors]
    batch.execute()
    moves: list[tuple[str, str, bool] | None] = []
    accepts = rt.partition.batch()
    pending: dict[int, Pending[Accepted]] = {}
    for position, (successor, reply) in enumerate(replies):
        state, replaces = reply.value
        if state is None:
            pending[position] = accepts.script(_accept_call(rt, successor, reason))
        moves.append((successor.old_id, successor.new_id, False) if replaces == successor.origin
                     and state is not None else None)
    accepts.execute()
    for position, found in pending.items():
        moves[position] = _accepted_move(replies[position][0], found.value)
    for position, move in enumerate(moves):
        if move is None:  # the id is another request's: the next free one, alone
            moved = _reschedule_one(rt, replies[position][0].item, reason)  # None: the record expired
            moves[position] = (replies[position][0].old_id, *moved) if moved is not None else None
    settled = [move for move in moves if move is not None]
    _note_moved(rt, [(old_id, new_id) for old_id, new_id, _ in settled])
    return [(new_id, recorded) for _, new_id, recorded in settled]


def _successors(rt: Runtime, released: Sequence[Released]) -> tuple[list[_Successor], list[Released]]:
    """The gpusched bookings with a stored request (each with its first successor id), and the
    others (control-plane instances, or records gone): one round trip."""
    pipe = rt.client.pipeline(transaction=False)
    for item in released:
        pipe.hget(rt.keys.request(item.meta.request_id or "-"), "request")
    successors: list[_Successor] = []
    lost: list[Released] = []
    for item, request_json in zip(released, pipe.execute() if released else [], strict=True):
        if item.meta.source != "gpusched" or not item.meta.request_id or not request_json:
            lost.append(item)
            continue
        old_id = str(item.meta.request_id)
        new_id = next(_successor_ids(old_id))
        successors.append(_Successor(item, old_id, new_id, f"{item.key}@{item.meta.order[0]}",
                                     _json_with_id(str(request_json), new_id)))
    return successors, lost


def _state_and_origin(reply: Any) -> tuple[str | None, str | None]:
    state, origin = reply
    return (None if state is None else str(state)), (None if origin is None else str(origin))


def _accept_call(rt: Runtime, successor: _Successor, reason: str) -> ScriptCall[Accepted]:
    item = successor.item
    moved = dumps({"instance_key": item.key, "from_request": successor.old_id, "reason": reason,
                   "pinned": item.meta.pinned})
    return rt.records.accept_call(
        successor.new_id, successor.request_json, sha256_hex(successor.request_json),
        pinned=item.meta.pinned, reschedule_of=successor.origin, rescheduled_data=moved,
        replaces=successor.old_id, outbox_due_ms=rt.partition.lease_deadline_ms(),
    )


def _accepted_move(successor: _Successor, accepted: Accepted) -> tuple[str, str, bool] | None:
    """(old id, new id, recorded now) once the new request's record exists, None when its id is
    another request's."""
    if accepted.accepted:
        metrics.count_reschedule()
        return successor.old_id, successor.new_id, True
    if accepted.reschedule_of == successor.origin:
        return successor.old_id, successor.new_id, False
    return None


def _report_lost(rt: Runtime, item: Released, reason: str) -> None:
    """A released booking nobody reschedules (a control-plane instance): ``sched.instance.lost``."""
    append_event(rt.client, rt.keys.events, "sched.instance.lost",
                 {"instance_key": item.key, "workers": list(item.meta.workers), "reason": reason})


def _note_moved(rt: Runtime, moves: Sequence[tuple[str, str]]) -> None:
    """:func:`_moved` for many: the existing old records only, in two round trips."""
    pipe = rt.client.pipeline(transaction=False)
    for old_id, _ in moves:
        pipe.exists(rt.keys.request(old_id))
    alive = pipe.execute() if moves else []
    pipe = rt.client.pipeline(transaction=False)
    for (old_id, new_id), exists in zip(moves, alive, strict=True):
        if exists:  # never recreate an expired record as a stub
            pipe.hset(rt.keys.request(old_id), "moved_to", new_id)
    pipe.execute()


def _reschedule_one(rt: Runtime, item: Released, reason: str) -> tuple[str, bool] | None:
    """The new request of one released booking, and whether it was recorded now (to enqueue)."""
    record = rt.records.record(item.meta.request_id) if item.meta.request_id else {}
    if item.meta.source != "gpusched" or not record.get("request"):
        _report_lost(rt, item, reason)
        return None
    old_id = str(item.meta.request_id)
    origin = f"{item.key}@{item.meta.order[0]}"
    moved = dumps({"instance_key": item.key, "from_request": old_id, "reason": reason,
                   "pinned": item.meta.pinned})
    for new_id in _successor_ids(old_id):
        state, replaces = rt.client.hmget(rt.keys.request(new_id), "state", "reschedule_of")
        if state is not None:
            if replaces == origin:  # an earlier run of this follow-up got this far
                return _moved(rt, old_id, new_id), False
            continue  # the id is taken by another request
        request = _json_with_id(record["request"], new_id)
        accepted = rt.records.accept(
            new_id, request, sha256_hex(request), pinned=item.meta.pinned, reschedule_of=origin,
            rescheduled_data=moved, replaces=old_id, outbox_due_ms=rt.partition.lease_deadline_ms(),
        )
        if accepted.accepted:
            metrics.count_reschedule()
            return _moved(rt, old_id, new_id), True
        if accepted.reschedule_of == origin:
            return _moved(rt, old_id, new_id), False
    raise AssertionError("unreachable: the successor ids are endless")


def _moved(rt: Runtime, old_id: str, new_id: str) -> str:
    """Note on the old record which request replaced its booking (a cancel follows it)."""
    key = rt.keys.request(old_id)
    if rt.client.exists(key):  # never recreate an expired record as a stub
        rt.client.hset(key, "moved_to", new_id)
    return new_id


def _successor_ids(request_id: str) -> Iterator[str]:
    base, _, moves = request_id.rpartition("~")
    if not (base and moves.isdigit()):
        base, moves = request_id, "0"
    return (f"{base}~{n}" for n in itertools.count(int(moves) + 1))


def _json_with_id(request_json: str, request_id: str) -> str:
    data = json.loads(request_json)
    data["request_id"] = request_id
    return canonical_json(data)
