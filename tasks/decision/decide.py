"""One decision message, end to end: lease → begin → sync → core → record → book → publish.

What ``gpusched.decide`` runs (:func:`decide_and_finish`), in two round trips
to Redis when the decide lease is free:

1. take the lease, claim the attempt (``begin.lua``) and read the cluster
   changes since the mirror's position, in one pipeline (:func:`_claim`);
2. sync the mirror, run the core in process (:mod:`tasks.decision.core_call`)
   and turn the result into the next step (:mod:`tasks.decision.next_step`);
3. record the decision, book it, release the lease and publish (or park), in
   one pipeline (:func:`_advance`) — four Lua scripts, each checking its own
   guard, so a booking that conflicts publishes nothing and its retry is
   queued (:mod:`tasks.decision.reserve`).

Guarantees (with the scripts' guards):

* a decision reads one consistent snapshot (the mirror at ``fold.version``)
  and is recorded with that version, the request digest and the chain, so it
  can be replayed;
* one decision is recorded per ``(seq, attempt)``: a second decider of the
  same attempt (a redelivered or re-driven message) continues with the
  recorded step instead of deciding again, and every later step carries the
  decision's result digest, which the scripts check — what is booked is
  what is published;
* every stage is idempotent under redelivery.

A step is left over only when another delivery recorded this attempt's
decision first; it goes on as a ``gpusched.resume`` message (:func:`resume`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from scheduler_core import deciding
from tasks.audit.decision_event import decision_event_data
from tasks.base.digests import result_digest, sha256_hex
from tasks.base.events import dumps
from tasks.base.step import Step
from tasks.decision.commit import Commit, Progress, decide_lease, resumed
from tasks.decision.core_call import run_core
from tasks.decision.lease import DecideLease
from tasks.decision.next_step import next_step
from tasks.decision.publish import publish
from tasks.decision.reserve import reserve
from tasks.flows import metrics
from tasks.flows.submit import accept_raw
from tasks.intake.requests import names_local_paths
from tasks.state.context import Runtime
from tasks.state.fold import ClusterFold
from tasks.state.mirror import Changes
from tasks.state.records import Begun, RecordOutcome
from tasks.state.scripts import ScriptCall

#: Fresh decisions tried when the record keeps refusing one as outdated (a checkpoint or a
#: cluster change landed in between each time); then the watchdog drives the request again.
OUTDATED_ATTEMPTS = 5


def decide(rt: Runtime, ref: Any, seq: int, attempt: int, task_id: str) -> Step | None:
    """Run the core's chain on a consistent snapshot and record the decision (no publish).

    With the decide lease held, the decision is also booked, in the same round
    trip as its record, and the step returned is its publish. The stage on its
    own: the tests use it to interleave deliveries between the stages.

    Args:
        ref: a request id (from a client, a wake or a retry), or a raw
            request dict (from any Celery-protocol client).
        seq: decision sequence (bumped by each wake).
        attempt: attempt within the sequence (bumped by each conflict).
        task_id: the Celery task id (recorded as the decider).
    """
    return _decide(rt, ref, seq, attempt, task_id, finish=False).step


def decide_and_finish(rt: Runtime, ref: Any, seq: int, attempt: int, task_id: str) -> Progress:
    """:func:`decide`, then book and publish (or park) in the record's round trip.

    What the ``gpusched.decide`` task runs. The steps keep their own guards — a
    ``scheduled`` result is published only once this decision is booked, so a
    reservation that conflicted publishes nothing and its retry is queued as
    :func:`~tasks.decision.reserve.reserve` queues it. When another delivery
    recorded this attempt's decision first, the returned step continues with
    the recorded one.
    """
    return _decide(rt, ref, seq, attempt, task_id, finish=True)


def resume(rt: Runtime, step: Step) -> str | None:
    """Finish a leftover step: book it if it is a reservation, then publish or park.

    What the ``gpusched.resume`` task runs. Returns the publish or park
    outcome (None when nothing was left: a retry was queued, or the record
    moved on).
    """
    after = reserve(rt, step)
    return None if after is None else publish(rt, after)


def _decide(rt: Runtime, ref: Any, seq: int, attempt: int, task_id: str, *, finish: bool) -> Progress:
    if not isinstance(ref, str):
        found = accept_raw(rt, ref, task_id)
        if found is None:
            return Progress(None)
        ref, seq, attempt = found, 0, 0
    for _ in range(OUTDATED_ATTEMPTS):
        with deciding():  # the collector's passes after the commit, with the lease released
            progress = _decide_once(rt, ref, seq, attempt, task_id, finish=finish)
        if not progress.outdated:
            return progress
    return Progress(None)


def _decide_once(rt: Runtime, ref: str, seq: int, attempt: int, task_id: str, *, finish: bool) -> Progress:
    with decide_lease(rt) as lease:
        begun, changes = _claim(rt, lease, ref, seq, attempt, task_id)
        if begun.recorded is not None:
            left = resumed(begun.recorded, seq, attempt)
            return _advance(rt, left, lease, finish=finish) if left else Progress(None)
        if begun.status != "ok" or begun.request_json is None:
            return Progress(None)
        step, record = _decision(rt, ref, seq, attempt, begun.request_json, begun.epoch, changes)
        return replace(_advance(rt, step, lease, finish=finish, record=record), created_ms=begun.created_ms)


def _claim(
    rt: Runtime, lease: DecideLease | None, ref: str, seq: int, attempt: int, task_id: str
) -> tuple[Begun, Changes | None]:
    """Take the decide lease (if enabled), begin the attempt, read the cluster's changes.

    One round trip when the lease is free. Two deciders working from the same
    snapshot pick the same GPUs (scoring is deterministic), so under load
    optimistic concurrency mostly produces reservation conflicts; holding a
    short lease across decide and reserve serialises them instead (K8s-style
    single active decider). A busy lease is waited for, then the attempt is
    begun again (another delivery may have decided it meanwhile) and the
    changes booked meanwhile are read. The lease expires on its own after
    ``decide_lock_ttl_s`` if its holder dies; a decider that cannot get it
    within ``decide_lock_wait_s`` proceeds optimistically: the reservation
    script keeps the ledger safe with or without the lease.
    """
    batch = rt.partition.batch()
    acquired = lease.try_acquire(batch) if lease is not None else None
    begun = batch.script(rt.records.begin_call(ref, seq, attempt, task_id))
    changes = rt.mirror.read_changes(batch)
    batch.execute()
    if acquired is not None and lease is not None and not acquired.value:
        lease.wait()
        return _claim(rt, None, ref, seq, attempt, task_id)
    return begun.value, changes.value if changes is not None else None


def _decision(
    rt: Runtime, ref: str, seq: int, attempt: int, request_json: str, epoch: int,
    changes: Changes | None,
) -> tuple[Step, ScriptCall[RecordOutcome]]:
    """The decision on the mirror (synced from ``changes``) and the call that records it."""
    started = time.perf_counter()
    fold = rt.mirror.sync(changes)
    return decide_on(rt, fold, ref, seq, attempt, request_json, epoch, started=started)


def decide_on(
    rt: Runtime, fold: ClusterFold, ref: str, seq: int, attempt: int, request_json: str, epoch: int,
    *, started: float | None = None, booked_by: str | None = None,
) -> tuple[Step, ScriptCall[RecordOutcome]]:
    """The core's decision on ``fold`` (at ``fold.version``), its step and the call recording it.

    Args:
        started: ``perf_counter()`` when the decision began (the event's ``elapsed_ms``).
        booked_by: the request whose booking, not yet committed, made ``fold.version`` (a
            batch's fold holds its earlier bookings: :mod:`tasks.decision.batch`); the record
            is refused as outdated unless that booking made the version and the cluster is
            still at it when the record runs.
    """
    started = time.perf_counter() if started is None else started
    roots = tuple(rt.settings.model_roots)
    request, result, prepared = run_core(rt.chain, request_json, ref, fold, rt.memo, model_roots=roots)
    metrics.count_decision(result.status)
    model = request.model if request else None
    step = next_step(ref, seq, attempt, epoch, fold, model, result, rt.chain.chain, prepared)
    text, step.result_digest = result_digest(result)
    elapsed_ms = round((time.perf_counter() - started) * 1000, 3)
    recorded_roots = roots if request is not None and names_local_paths(request.model) else None
    data = decision_event_data(step, sha256_hex(request_json), rt.chain.recorded_spec, result, elapsed_ms,
                               recorded_roots)
    record = rt.records.record_decision_call(
        step.request_id, step.seq, step.attempt, step.version, text, step.result_digest,
        dumps(data), dumps(step.to_dict()), booked_by=booked_by,
    )
    return step, record


def _advance(
    rt: Runtime, step: Step, lease: DecideLease | None, *, finish: bool,
    record: ScriptCall[RecordOutcome] | None = None,
) -> Progress:
    """Send the record, the booking, the lease release and the final step in one round trip.

    The booking is sent when the lease is held (nothing can book in between)
    or when finishing; the release right after it, so the next decider's
    snapshot holds the booking; the publish or park step only when finishing.
    """
    held = lease is not None and lease.held
    commit = Commit(step)
    batch = rt.partition.batch()
    commit.queue_booking(rt, batch, record, books=held or finish)
    if lease is not None and held:
        batch.script(lease.release_call())
    if finish:
        commit.queue_final(rt, batch)
    batch.execute()
    if lease is not None and held:
        lease.released()
    return commit.progress(rt, finish=finish)
