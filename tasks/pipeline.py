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
* every stage is idempotent under redelivery.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import ValidationError
from redis.exceptions import LockError

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
from tasks.store import Booking, Recorded, RecordOutcome
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
        """The message form."""
        return asdict(self)

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
def decide(rt: Runtime, ref: Any, seq: int, attempt: int, task_id: str) -> Step | None:
    """Run the core's chain on a consistent snapshot and record the decision.

    Args:
        ref: a request id (from ``tasks.client``, a wake or a retry), or a raw
            request dict (from any Celery-protocol client).
        seq: decision sequence (bumped by each wake).
        attempt: attempt within the sequence (bumped by each conflict).
        task_id: the Celery task id (recorded as the decider).
    """
    if not isinstance(ref, str):
        found = intake(rt, ref, task_id)
        if found is None:
            return None
        ref, seq, attempt = found, 0, 0
    with _decide_lock(rt):
        step = _decide_claimed(rt, ref, seq, attempt, task_id)
        if rt.settings.decide_lock and step is not None and step.action == "reserve":
            return reserve(rt, step)  # inside the lease: nothing can book in between
        return step


@contextmanager
def _decide_lock(rt: Runtime) -> Iterator[None]:
    """The partition's decide lease (K8s-style single active decider), if enabled.

    Two deciders working from the same snapshot pick the same GPUs (scoring is
    deterministic), so under load optimistic concurrency mostly produces
    reservation conflicts; holding a short lease across decide and reserve
    serialises them instead. The lease expires on its own after
    ``decide_lock_ttl_s`` if its holder dies, and a decider that cannot get it
    within ``decide_lock_wait_s`` proceeds optimistically: the reservation
    script keeps the ledger safe with or without the lease.
    """
    if not rt.settings.decide_lock:
        yield
        return
    lease = rt.client.lock(
        rt.keys.decide_lock, timeout=rt.settings.decide_lock_ttl_s, sleep=0.002,
        blocking_timeout=rt.settings.decide_lock_wait_s,
    )
    held = lease.acquire()
    try:
        yield
    finally:
        if held:
            with suppress(LockError):
                lease.release()


def _decide_claimed(rt: Runtime, ref: str, seq: int, attempt: int, task_id: str) -> Step | None:
    begun = rt.store.begin(ref, seq, attempt, task_id)
    if begun.recorded is not None:
        return resumed_step(begun.recorded, seq, attempt)
    if begun.status != "ok" or begun.request_json is None:
        return None
    started = time.perf_counter()
    fold = rt.mirror.sync()
    request, result = run_core(rt.chain, begun.request_json, ref, fold, rt.memo)
    if request is None:
        step = Step(ref, seq, attempt, "publish", result.status, fold.version, begun.epoch)
        step.error = error_of(result)
    else:
        step = _step_for(rt, ref, seq, attempt, begun.epoch, fold, request.model, result)
    text, step.result_digest = result_digest(result)
    elapsed_ms = round((time.perf_counter() - started) * 1000, 3)
    outcome = _record(rt, step, sha256_hex(begun.request_json), result, text, elapsed_ms)
    if outcome.earlier is not None:
        return resumed_step(outcome.earlier, seq, attempt)
    return step if outcome.recorded else None


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


def _record(
    rt: Runtime, step: Step, request_digest: str, result: ScheduleResult, text: str,
    elapsed_ms: float,
) -> RecordOutcome:
    spec = rt.chain.spec
    data = {
        "seq": step.seq,
        "attempt": step.attempt,
        "cluster_version": step.version,
        "wake_epoch": step.epoch,
        "request_digest": request_digest,
        "inputs_digest": inputs_digest(request_digest, step.version, spec.digest),
        "chain": {**spec.model_dump(mode="json"), "digest": spec.digest},
        "result_digest": step.result_digest,
        "action": step.action,
        "reasons": step.reasons,
        "outcome": outcome_summary(result),
        "elapsed_ms": elapsed_ms,
    }
    return rt.store.record_decision(
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
    booking = Booking(**step.booking)
    delay = jitter_s(rt, step.request_id, step.seq, step.attempt + 1)
    due = rt.store.now_ms() + int(delay * 1000) + lease_ms(rt)
    retried = dumps({"attempt": step.attempt + 1, "delay_ms": round(delay * 1000, 3)})
    outcome = rt.store.reserve(
        step.request_id, step.seq, step.attempt, booking, due, retried,
        result_digest=step.result_digest,
    )
    if outcome.status in ("booked", "duplicate"):
        step.action = "publish"
        return step
    if outcome.status == "conflict" and outcome.next_attempt is not None:
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
    if step.action == "park":
        return park(rt, step)
    if step.action != "publish":
        return None
    status = "scheduled" if step.status == "scheduled" else "rejected"
    rejected = dumps({"error": step.error}) if status == "rejected" else ""
    outcome, _ = rt.store.publish(
        step.request_id, status, seq=step.seq, attempt=step.attempt,
        result_digest=step.result_digest, rejected_data=rejected,
    )
    return outcome


def park(rt: Runtime, step: Step) -> str:
    """Park with the blocking reasons (or requeue at once if the cluster changed meanwhile).

    A request parked only because its reservations kept conflicting is not
    announced as unschedulable (it is merely contended) and is retried after
    ``conflict_retry_after_s`` by a timer armed in the same step, besides any
    wake-up by capacity.
    """
    contended = step.reasons == [CONFLICT_REASON]
    now = rt.store.now_ms()
    entry = ParkedEntry(
        seq=step.seq, reasons=step.reasons, decided_version=step.version, parked_ms=now,
        **step.park,
    )
    retry = None
    if contended:
        retry = (retry_timer(step.request_id, step.seq), now + int(rt.settings.conflict_retry_after_s * 1000))
    outcome, detail = rt.store.park(
        step.request_id, step.seq, step.attempt, result_digest=step.result_digest,
        parked_entry=parked_json(entry), notice_json=step.notice,
        event_data=dumps({"seq": step.seq, "reasons": step.reasons, "cluster_version": step.version}),
        epoch=step.epoch, requeue_due_ms=now + lease_ms(rt), announce=not contended,
        retry_timer=retry,
    )
    if outcome == "requeued" and detail is not None:
        enqueue(rt, step.request_id, int(detail), 0)
    return outcome


def retry_timer(request_id: str, seq: int) -> str:
    """Timer member that wakes a request parked by reservation conflicts."""
    return f"retry:{request_id}|{seq}"
