"""The decision pipeline as plain functions: decide → reserve → publish.

The Celery tasks in :mod:`tasks.worker_tasks` are thin wrappers around these
functions; the unit tests call them directly on fakeredis. A :class:`Step`
(small JSON dict) flows from one stage to the next; ``None`` means "nothing
more to do for this message" (superseded, duplicate, retried elsewhere).

Guarantees (with the Lua scripts' guards):

* a decision reads one consistent snapshot (the mirror at ``fold.version``)
  and is recorded with that version, the request digest and the chain, so it
  can be replayed;
* one decision is recorded per ``(seq, attempt)``: a second decider of the
  same attempt (a redelivered or re-driven message) continues with the
  recorded step instead of deciding again, and every later step carries the
  decision's result digest, which the Lua scripts check — what is booked is
  what is published;
* a reservation books every GPU of the selected candidate or none, and a
  request books at most once;
* a conflict retries with a fresh snapshot after a deterministic jitter
  (seeded from the request id and attempt), at most ``conflict_max_attempts``
  times per decision, then parks with ``conflict_retries_exhausted``;
* every stage is idempotent under redelivery;
* the Celery ``decide`` task runs :func:`decide_and_finish`: the decision's
  record, booking, lease release and publish (or park) step go to Redis in one
  round trip, each still one script checking its own guard, so the reserve
  and publish hops are only taken by a step left over.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from pydantic import ValidationError

from scheduler_core import (
    ModelSpec,
    ScheduleRequest,
    ScheduleResult,
    SnapshotMemo,
    schedule,
)
from tasks.chain import LoadedChain
from tasks.edge import Normalized, normalize, sha256_hex, with_request_id
from tasks.fold import ClusterFold
from tasks.lease import DecideLease
from tasks.mirror import Changes
from tasks.outcome import (
    booking_for,
    error_of,
    inputs_digest,
    outcome_summary,
    overcommit_notice,
    result_digest,
)
from tasks.parking import ParkedEntry, blocking_reasons, parked_json
from tasks.runtime import Runtime
from tasks.scripts import ScriptCall
from tasks.store import Begun, Booking, Recorded, RecordOutcome, Reserved
from tasks.streams import dumps

#: Parking reason of a request whose reservation attempts all conflicted.
CONFLICT_REASON = "conflict_retries_exhausted"
#: Text of the notice published when conflicts exhaust a decision's attempts.
EXHAUSTED_MESSAGE = (
    "The cluster kept changing under the decision (reservation conflicts); "
    "the request waits for capacity to be freed."
)
# --------------------------------------------------------------------- step
@dataclass(slots=True)
class Step:
    """What one stage hands to the next (JSON-serialisable).

    ``result_digest`` names the recorded decision the step comes from; the
    reserve, park and publish scripts act only if the record still holds it.
    """

    request_id: str
    seq: int
    attempt: int
    action: str  # reserve | park | publish
    status: str  # the core's status
    version: int
    epoch: int
    result_digest: str = ""
    booking: dict[str, str] | None = None
    reasons: list[str] = field(default_factory=list)
    park: dict[str, Any] = field(default_factory=dict)
    notice: str = ""
    error: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The message form (its lists and dicts copied; values nested deeper are shared)."""
        return {name: _copied(getattr(self, name)) for name in _STEP_FIELDS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Step:
        """Inverse of :meth:`to_dict`.

        Raises:
            TypeError / ValueError: not a step (unknown or missing fields, wrong types).
        """
        step = cls(**dict(data))
        typed = (
            isinstance(step.request_id, str) and isinstance(step.action, str)
            and all(isinstance(v, int) for v in (step.seq, step.attempt, step.version, step.epoch))
            and isinstance(step.result_digest, str)
        )
        if not typed:
            raise ValueError("malformed step")
        return step


#: Field names of :class:`Step`, in declaration order.
_STEP_FIELDS = tuple(f.name for f in fields(Step))


def _copied(value: Any) -> Any:
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    return value


def resumed_step(recorded: Recorded, seq: int, attempt: int) -> Step | None:
    """The step to continue with when ``(seq, attempt)`` was already decided.

    A decided attempt continues with its recorded step (reserve, park or
    publish); a booked one with its publish; anything else has nothing left
    for this message.
    """
    step = Step.from_dict(json.loads(recorded.step_json))
    if (step.seq, step.attempt) != (seq, attempt):
        return None
    if recorded.state == "booked":
        step.action = "publish"
        return step
    return step if recorded.state == "decided" else None


def enqueue(rt: Runtime, request_id: str, seq: int, attempt: int, *, countdown: float = 0.0) -> None:
    """Send a decision to the queue, then move its outbox entry to the watchdog deadline.

    Every request that is neither finished nor parked keeps one outbox entry
    (``<id>|<seq>|<attempt>``), written by the same Lua step that made it need
    a decision and removed by the step that finishes or parks it. Until the
    message is sent the entry is due after ``outbox_lease_s`` (the sender may
    die); once sent, after ``stuck_after_s`` (the message may still be lost,
    e.g. popped by a consumer when Redis died): whenever it comes due, the
    drainer drives the request again.
    """
    rt.dispatch(request_id, seq, attempt, countdown)
    rt.store.arm_watchdog(request_id, seq, attempt)


def lease_ms(rt: Runtime) -> int:
    """How long an outbox entry waits for its fast-path publisher before the drainer acts."""
    return int(rt.settings.outbox_lease_s * 1000)


# ------------------------------------------------------------------- intake
def intake(rt: Runtime, raw: Any, task_id: str) -> str | None:
    """Accept a raw request that arrived on the queue from a Celery-protocol client.

    Returns:
        The request id to decide at (seq 0, attempt 0), or None when there is
        nothing to decide (invalid: rejected result published; duplicate id).
    """
    normalized = normalize(raw)
    if normalized.rejection is not None:
        publish_rejection(rt, normalized)
        return None
    watchdog = rt.store.now_ms() + int(rt.settings.stuck_after_s * 1000)
    accepted = rt.store.accept(
        normalized.request_id, normalized.request_json, normalized.digest,
        intake_task=task_id, pinned=normalized.pinned, outbox_due_ms=watchdog,
    )
    if accepted.accepted or accepted.intake_task == task_id:
        return normalized.request_id
    return None


def publish_rejection(rt: Runtime, normalized: Normalized) -> tuple[str, str | None]:
    """Publish the edge rejection of an invalid request (only if the id is new)."""
    assert normalized.rejection is not None
    result = normalized.rejection
    text = result.model_dump_json()
    return rt.store.reject(
        normalized.request_id, request_json=normalized.request_json,
        request_digest=normalized.digest, result_json=text, result_digest=sha256_hex(text),
        error=error_of(result),
    )


# ------------------------------------------------------------------- decide
@dataclass(frozen=True, slots=True)
class Progress:
    """How far one decide message got.

    ``step`` is what the next stage continues with (None: nothing left for this
    message); ``outcome`` is the publish or park outcome when this message
    finished the request itself.
    """

    step: Step | None
    outcome: str | None = None


def decide(rt: Runtime, ref: Any, seq: int, attempt: int, task_id: str) -> Step | None:
    """Run the core's chain on a consistent snapshot and record the decision.

    With the decide lease held, the decision is also booked, in the same round
    trip as its record, and the step returned is its publish.

    Args:
        ref: a request id (from ``tasks.client``, a wake or a retry), or a raw
            request dict (from any Celery-protocol client).
        seq: decision sequence (bumped by each wake).
        attempt: attempt within the sequence (bumped by each conflict).
        task_id: the Celery task id (recorded as the decider).
    """
    return _decide(rt, ref, seq, attempt, task_id, finish=False).step


def decide_and_finish(rt: Runtime, ref: Any, seq: int, attempt: int, task_id: str) -> Progress:
    """:func:`decide`, then book and publish (or park) in the record's round trip.

    What the Celery ``decide`` task runs: a decision and its reserve and
    publish steps in one message. The steps keep their own guards — a
    ``scheduled`` result is published only once this decision is booked, so a
    reservation that conflicted publishes nothing and its retry is queued as
    :func:`reserve` queues it. When another delivery recorded this attempt's
    decision first, the returned step continues with the recorded one.
    """
    return _decide(rt, ref, seq, attempt, task_id, finish=True)


def _decide(rt: Runtime, ref: Any, seq: int, attempt: int, task_id: str, *, finish: bool) -> Progress:
    if not isinstance(ref, str):
        found = intake(rt, ref, task_id)
        if found is None:
            return Progress(None)
        ref, seq, attempt = found, 0, 0
    lease = DecideLease(rt.client, rt.keys, rt.settings) if rt.settings.decide_lock else None
    try:
        begun, changes = _claim(rt, lease, ref, seq, attempt, task_id)
        if begun.recorded is not None:
            resumed = resumed_step(begun.recorded, seq, attempt)
            return _advance(rt, resumed, lease, finish=finish) if resumed else Progress(None)
        if begun.status != "ok" or begun.request_json is None:
            return Progress(None)
        step, record = _decision(rt, ref, seq, attempt, begun.request_json, begun.epoch, changes)
        return _advance(rt, step, lease, finish=finish, record=record)
    finally:
        if lease is not None and lease.may_hold:  # also when a reply was lost or an error came first
            rt.store.call(lease.release_call())
            lease.released()


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
    batch = rt.store.batch()
    acquired = lease.try_acquire(batch) if lease is not None else None
    begun = batch.script(rt.store.begin_call(ref, seq, attempt, task_id))
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
    request, result = run_core(rt.chain, request_json, ref, fold, rt.memo)
    if request is None:
        step = Step(ref, seq, attempt, "publish", result.status, fold.version, epoch)
        step.error = error_of(result)
    else:
        step = _step_for(rt, ref, seq, attempt, epoch, fold, request.model, result)
    text, step.result_digest = result_digest(result)
    elapsed_ms = round((time.perf_counter() - started) * 1000, 3)
    return step, _record_call(rt, step, sha256_hex(request_json), result, text, elapsed_ms)


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
    books = step.action == "reserve" and step.booking is not None and (held or finish)
    last = replace(step, action="publish") if books else step
    batch = rt.store.batch()
    recorded = batch.script(record) if record is not None else None
    reserved = batch.script(_reserve_call(rt, step)) if books else None
    if lease is not None and held:
        batch.script(lease.release_call())
    final = _final_call(rt, last) if finish else None
    pending = batch.script(final) if final is not None else None
    batch.execute()
    if lease is not None and held:
        lease.released()
    if recorded is not None and not recorded.value.recorded:
        earlier = recorded.value.earlier
        return Progress(resumed_step(earlier, step.seq, step.attempt) if earlier else None)
    after = _after_reserve(rt, step, reserved.value) if reserved is not None else step
    if not finish or after is None:
        return Progress(after)
    if pending is not None and after.action == last.action:
        return Progress(None, _after_final(rt, after, pending.value))
    return Progress(None, publish(rt, after))  # e.g. conflicts exhausted: park now


def run_core(
    chain: LoadedChain,
    request_json: str,
    request_id: str,
    fold: ClusterFold,
    memo: SnapshotMemo | None = None,
) -> tuple[ScheduleRequest | None, ScheduleResult]:
    """The decision itself: the stored request, the fold's cluster, the chain → the core.

    Pure given its inputs (the replay calls it with a fold rebuilt from the log).
    Returns the effective request (None if the stored request no longer
    validates, which yields the core's ``rejected`` result) and the result.
    """
    try:
        request = _request_for(chain, request_json)
    except ValidationError:
        return None, with_request_id(schedule(json.loads(request_json)), request_id)
    cluster = {"workers": fold.worker_list(), "model_instances": fold.instance_list()}
    return request, schedule(request.model_copy(update=cluster), chain=chain.chain, memo=memo)


def _request_for(chain: LoadedChain, request_json: str) -> ScheduleRequest:
    request = ScheduleRequest.model_validate_json(request_json)
    override = chain.placement_override
    if override and request.model.placement_strategy != override:
        model = request.model.model_copy(update={"placement_strategy": override})
        request = request.model_copy(update={"model": model})
    return request


def _step_for(
    rt: Runtime, request_id: str, seq: int, attempt: int, epoch: int, fold: ClusterFold,
    model: ModelSpec, result: ScheduleResult,
) -> Step:
    park = ParkedEntry.for_model(model, seq, (), fold.version, 0).model_dump(
        mode="json", include={"worker_selector", "pinned_workers", "cluster_id"}
    )
    step = Step(request_id, seq, attempt, "publish", result.status, fold.version, epoch, park=park)
    if result.status == "rejected":
        step.error = error_of(result)
        return step
    if result.status == "unschedulable" or result.selected is None:
        step.action = "park"
        step.reasons = blocking_reasons(result, result.blocked_by)
        return step
    chosen = result.candidates[result.selected]
    if chosen.overcommit:
        step.action = "park"
        step.reasons = blocking_reasons(result, None, overcommit=True)
        step.notice = overcommit_notice(result).model_dump_json()
        return step
    step.action = "reserve"
    step.booking = asdict(booking_for(fold, request_id, model, chosen))
    return step


def _record_call(
    rt: Runtime, step: Step, request_digest: str, result: ScheduleResult, text: str,
    elapsed_ms: float,
) -> ScriptCall[RecordOutcome]:
    chain = rt.chain.recorded_spec
    data = {
        "seq": step.seq,
        "attempt": step.attempt,
        "cluster_version": step.version,
        "wake_epoch": step.epoch,
        "request_digest": request_digest,
        "inputs_digest": inputs_digest(request_digest, step.version, chain["digest"]),
        "chain": chain,
        "result_digest": step.result_digest,
        "action": step.action,
        "reasons": step.reasons,
        "outcome": outcome_summary(result),
        "elapsed_ms": elapsed_ms,
    }
    return rt.store.record_decision_call(
        step.request_id, step.seq, step.attempt, step.version, text, step.result_digest,
        dumps(data), dumps(step.to_dict()),
    )


# ------------------------------------------------------------------ reserve
def jitter_s(rt: Runtime, request_id: str, seq: int, attempt: int) -> float:
    """Deterministic full jitter (seeded by the attempt) before a conflict retry."""
    base = rt.settings.conflict_jitter_ms * (2 ** min(attempt, 3)) / 1000
    rng = random.Random(f"{request_id}:{seq}:{attempt}")
    return min(rng.uniform(0, base), rt.settings.max_countdown_s)


def reserve(rt: Runtime, step: Step) -> Step | None:
    """Book the decided placement; on conflict queue a fresh decision and stop."""
    if step.action != "reserve" or step.booking is None:
        return step
    return _after_reserve(rt, step, rt.store.call(_reserve_call(rt, step)))


def _reserve_call(rt: Runtime, step: Step) -> ScriptCall[Reserved]:
    assert step.booking is not None
    booking = Booking(**step.booking)
    delay = jitter_s(rt, step.request_id, step.seq, step.attempt + 1)
    due = rt.store.now_ms() + int(delay * 1000) + lease_ms(rt)
    retried = dumps({"attempt": step.attempt + 1, "delay_ms": round(delay * 1000, 3)})
    return rt.store.reserve_call(
        step.request_id, step.seq, step.attempt, booking, due, retried,
        result_digest=step.result_digest,
    )


def _after_reserve(rt: Runtime, step: Step, outcome: Reserved) -> Step | None:
    if outcome.status in ("booked", "duplicate"):
        step.action = "publish"
        return step
    if outcome.status == "conflict" and outcome.next_attempt is not None:
        delay = jitter_s(rt, step.request_id, step.seq, step.attempt + 1)
        enqueue(rt, step.request_id, step.seq, outcome.next_attempt, countdown=delay)
        return None
    if outcome.status == "exhausted":
        step.action = "park"
        step.reasons = [CONFLICT_REASON]
        notice = ScheduleResult(
            request_id=step.request_id, status="unschedulable", messages=[EXHAUSTED_MESSAGE]
        )
        step.notice = notice.model_dump_json()
        return step
    return None


# ------------------------------------------------------------------ publish
def publish(rt: Runtime, step: Step) -> str | None:
    """Publish the terminal result, or park the request. Returns the outcome name."""
    final = _final_call(rt, step)
    return None if final is None else _after_final(rt, step, rt.store.call(final))


def park(rt: Runtime, step: Step) -> str:
    """Park with the blocking reasons (or requeue at once if the cluster changed meanwhile).

    A request parked only because its reservations kept conflicting is not
    announced as unschedulable (it is merely contended) and is retried after
    ``conflict_retry_after_s`` by a timer armed in the same step, besides any
    wake-up by capacity.
    """
    return _after_park(rt, step, rt.store.call(_park_call(rt, step)))


def _final_call(rt: Runtime, step: Step) -> ScriptCall[tuple[str, str | None]] | None:
    """The publish or park call of a step (None for any other action)."""
    if step.action == "park":
        return _park_call(rt, step)
    if step.action != "publish":
        return None
    status = "scheduled" if step.status == "scheduled" else "rejected"
    rejected = dumps({"error": step.error}) if status == "rejected" else ""
    return rt.store.publish_call(
        step.request_id, status, seq=step.seq, attempt=step.attempt,
        result_digest=step.result_digest, rejected_data=rejected,
    )


def _after_final(rt: Runtime, step: Step, reply: tuple[str, str | None]) -> str:
    return _after_park(rt, step, reply) if step.action == "park" else reply[0]


def _park_call(rt: Runtime, step: Step) -> ScriptCall[tuple[str, str | None]]:
    contended = step.reasons == [CONFLICT_REASON]
    now = rt.store.now_ms()
    entry = ParkedEntry(
        seq=step.seq, reasons=step.reasons, decided_version=step.version, parked_ms=now,
        **step.park,
    )
    retry = None
    if contended:
        retry = (retry_timer(step.request_id, step.seq), now + int(rt.settings.conflict_retry_after_s * 1000))
    return rt.store.park_call(
        step.request_id, step.seq, step.attempt, result_digest=step.result_digest,
        parked_entry=parked_json(entry), notice_json=step.notice,
        event_data=dumps({"seq": step.seq, "reasons": step.reasons, "cluster_version": step.version}),
        epoch=step.epoch, requeue_due_ms=now + lease_ms(rt), announce=not contended,
        retry_timer=retry,
    )


def _after_park(rt: Runtime, step: Step, reply: tuple[str, str | None]) -> str:
    outcome, detail = reply
    if outcome == "requeued" and detail is not None:
        enqueue(rt, step.request_id, int(detail), 0)
    return outcome


def retry_timer(request_id: str, seq: int) -> str:
    """Timer member that wakes a request parked by reservation conflicts."""
    return f"retry:{request_id}|{seq}"
