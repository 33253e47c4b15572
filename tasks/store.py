"""Request records, results, parking, delays and the redelivery guard in Redis.

Thin typed wrappers over the Lua scripts in :mod:`tasks.scripts`; every
method is one atomic step and is safe to repeat (the scripts guard on the
record's ``state``/``seq``/``attempt`` and on the recorded decision's result
digest). A request record moves through::

    queued → deciding → decided → booked → done(scheduled)
                 │          ├──→ retrying → deciding ...     (reservation conflict)
                 │          ├──→ done(rejected)
                 │          └──→ parked → woken → deciding ... (cluster change)
                 └── (a second decider of the same attempt resumes the recorded step)

The decision's steps are prepared calls (``begin_call``,
``record_decision_call``, ``reserve_call``, ``publish_call``, ``park_call``):
:mod:`tasks.pipeline` sends several in one round trip
(:class:`tasks.scripts.Batch`), :meth:`Store.call` runs one on its own.

Cluster mutations live in :mod:`tasks.cluster_store`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from tasks.edge import sha256_hex
from tasks.keys import Keys
from tasks.scripts import Batch, ScriptCall, Scripts, T
from tasks.settings import Settings
from tasks.streams import EventMeta, default_source, dumps

#: Clock returning seconds since the epoch (injectable for tests).
Clock = Callable[[], float]
#: At most 2**REDRIVE_DOUBLINGS watchdog periods between two re-drives of one attempt
#: (≈ 3 h at the default ``stuck_after_s``): a lost message is still found, a long
#: backlog gets a logarithmic number of extra messages.
REDRIVE_DOUBLINGS = 5


def outbox_member(request_id: str, seq: int, attempt: int) -> str:
    """Outbox member naming one decision attempt."""
    return f"{request_id}|{seq}|{attempt}"


def parse_outbox_member(member: str) -> tuple[str, int, int]:
    """Inverse of :func:`outbox_member` (request ids may contain ``|``)."""
    request_id, seq, attempt = member.rsplit("|", 2)
    return request_id, int(seq), int(attempt)


@dataclass(frozen=True, slots=True)
class Accepted:
    """Outcome of :meth:`Store.accept` (for a duplicate: what the known record says)."""

    accepted: bool
    state: str = ""
    intake_task: str = ""
    reschedule_of: str = ""


@dataclass(frozen=True, slots=True)
class Recorded:
    """A decision attempt that is already decided: its record state and its step JSON."""

    state: str
    step_json: str


@dataclass(frozen=True, slots=True)
class RecordOutcome:
    """Outcome of :meth:`Store.record_decision`; true when this decision was recorded.

    ``earlier`` is the decision another decider recorded first for the same
    attempt (continue with its step), None when the record moved on.
    """

    recorded: bool
    earlier: Recorded | None = None

    def __bool__(self) -> bool:
        return self.recorded


@dataclass(frozen=True, slots=True)
class Begun:
    """Outcome of :meth:`Store.begin`.

    ``ok`` carries the request JSON and the wake epoch; ``resume`` the
    decision already recorded for this attempt (continue with it).
    """

    status: str
    request_json: str | None = None
    epoch: int = 0
    recorded: Recorded | None = None


@dataclass(frozen=True, slots=True)
class Reserved:
    """Outcome of :meth:`Store.reserve` (``version``: the cluster version a booking produced)."""

    status: str
    version: int | None = None
    detail: str | None = None
    next_attempt: int | None = None


@dataclass(frozen=True, slots=True)
class Booking:
    """What a reservation books: the instance row, its meta and its claims."""

    instance_key: str
    row_json: str
    meta_json: str
    claims: str
    event_data: str


class Store:
    """Request lifecycle operations for one cluster partition."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        settings: Settings,
        *,
        clock: Clock = time.time,
        source: str | None = None,
    ) -> None:
        self.client = client
        self.keys = keys
        self.settings = settings
        self.clock = clock
        self.source = source or default_source()
        self.scripts = Scripts(client)

    # ------------------------------------------------------------------ helpers
    def now_ms(self) -> int:
        """Current time in milliseconds (from the injected clock)."""
        return int(self.clock() * 1000)

    def meta(self) -> EventMeta:
        """A fresh event envelope head stamped with this store's source."""
        return EventMeta.new(self.source)

    def _run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        return self.scripts.run(name, keys, args)

    def batch(self) -> Batch:
        """An empty batch of calls for one round trip."""
        return self.scripts.batch()

    def call(self, call: ScriptCall[T]) -> T:
        """Run one prepared call (``begin_call``, ``reserve_call``, ...) on its own."""
        return self.scripts.call(call)

    def _results_keys(self, request_id: str) -> list[str]:
        k = self.keys
        return [k.request(request_id), k.results, k.events, k.parked, k.outbox]

    # ----------------------------------------------------------------- requests
    def accept(
        self,
        request_id: str,
        request_json: str,
        digest: str,
        *,
        intake_task: str = "",
        pinned: bool = False,
        reschedule_of: str = "",
        rescheduled_data: str = "",
        outbox_due_ms: int | None = None,
    ) -> Accepted:
        """Create the record of a new request (idempotent on ``request_id``).

        Args:
            reschedule_of: ``<instance key>@<booked version>`` of the booking
                this request replaces ("" for a submitted request).
            rescheduled_data: data of the ``sched.instance.rescheduled`` event
                written with the record ("" for none).
        """
        data = dumps({"digest": digest, "request": _raw(request_json), "reschedule_of": reschedule_of})
        reply = self._run(
            "accept",
            [self.keys.request(request_id), self.keys.events, self.keys.outbox],
            [
                *self.meta().argv(), request_id, request_json, digest, intake_task,
                self.now_ms(), data, "" if outbox_due_ms is None else outbox_due_ms,
                "1" if pinned else "0", reschedule_of, rescheduled_data,
            ],
        )
        if reply[0] == "accepted":
            return Accepted(True)
        return Accepted(False, reply[1], reply[2], reply[3])

    def begin_call(self, request_id: str, seq: int, attempt: int, task_id: str) -> ScriptCall[Begun]:
        """Claim decision ``(seq, attempt)`` (see ``begin.lua``)."""
        keys = [self.keys.request(request_id), self.keys.epoch]
        return ScriptCall("begin", keys, [seq, attempt, task_id, self.now_ms()], _begun)

    def record_decision_call(
        self,
        request_id: str,
        seq: int,
        attempt: int,
        version: int,
        result_json: str,
        result_digest: str,
        event_data: str,
        step_json: str = "",
    ) -> ScriptCall[RecordOutcome]:
        """Store the core's result and step, write ``sched.decision.made`` (first writer wins)."""
        args = [
            *self.meta().argv(), request_id, seq, attempt, version, result_json, result_digest,
            event_data, self.now_ms(), step_json,
        ]
        keys = [self.keys.request(request_id), self.keys.events]
        return ScriptCall("record_decision", keys, args, _record_outcome)

    def reserve_call(
        self,
        request_id: str,
        seq: int,
        attempt: int,
        booking: Booking,
        retry_due_ms: int,
        retried_data: str,
        *,
        result_digest: str,
    ) -> ScriptCall[Reserved]:
        """Book all claims of ``booking`` or none (see ``reserve.lua``).

        ``result_digest`` names the recorded decision the booking comes from.
        """
        k = self.keys
        keys = [
            k.request(request_id), k.capacity, k.booked, k.instances, k.instance_meta,
            k.claims, k.version, k.changes, k.events, k.outbox,
        ]
        args = [
            *self.meta().argv(), request_id, seq, attempt, result_digest, booking.instance_key,
            booking.row_json, booking.meta_json, booking.claims, booking.event_data,
            self.settings.conflict_max_attempts, retry_due_ms,
            self.settings.changes_maxlen, self.now_ms(), retried_data,
        ]
        return ScriptCall("reserve", keys, args, _reserved)

    def publish_call(
        self,
        request_id: str,
        status: str,
        *,
        seq: int,
        attempt: int,
        result_digest: str,
        rejected_data: str = "",
    ) -> ScriptCall[tuple[str, str | None]]:
        """Publish the recorded decision's terminal result once; replies (outcome, entry id)."""
        args = [
            *self.meta().argv(), request_id, status, seq, attempt, result_digest,
            self.settings.results_maxlen, self.settings.request_ttl_s, self.now_ms(), rejected_data,
        ]
        return ScriptCall("publish", self._results_keys(request_id), args, _outcome_and_id)

    def reject(
        self,
        request_id: str,
        *,
        request_json: str,
        request_digest: str,
        result_json: str,
        result_digest: str,
        error: dict[str, Any] | None,
    ) -> tuple[str, str | None]:
        """Publish the edge rejection of an invalid request, only if the id is new."""
        received = dumps({"digest": request_digest, "request": _raw(request_json), "reschedule_of": ""})
        reply = self._run(
            "reject",
            self._results_keys(request_id),
            [
                *self.meta().argv(), request_id, request_json, request_digest, result_json,
                result_digest, received, dumps({"error": error}), self.settings.results_maxlen,
                self.settings.request_ttl_s, self.now_ms(),
            ],
        )
        return reply[0], reply[1] if len(reply) > 1 else None

    def park_call(
        self,
        request_id: str,
        seq: int,
        attempt: int,
        *,
        result_digest: str,
        parked_entry: str,
        notice_json: str,
        event_data: str,
        epoch: int,
        requeue_due_ms: int,
        announce: bool = True,
        retry_timer: tuple[str, int] | None = None,
    ) -> ScriptCall[tuple[str, str | None]]:
        """Park the request, or requeue it if the cluster changed meanwhile (see ``park.lua``).

        Args:
            retry_timer: ``(member, due ms)`` of the timer that retries a request
                parked by reservation conflicts, armed in the same step.
        """
        k = self.keys
        member, due = retry_timer if retry_timer else ("", 0)
        keys = [k.request(request_id), k.parked, k.results, k.events, k.epoch, k.outbox, k.timers]
        args = [
            *self.meta().argv(), request_id, seq, attempt, result_digest, parked_entry,
            notice_json, self.settings.results_maxlen, event_data, self.now_ms(), epoch,
            requeue_due_ms, "1" if announce else "0", member, due,
        ]
        return ScriptCall("park", keys, args, _outcome_and_id)

    def wake(
        self, targets: Sequence[tuple[str, int]], by: dict[str, Any], due_ms: int
    ) -> list[tuple[str, int]]:
        """Wake parked requests still at the given seq; returns (request id, new seq) pairs."""
        if not targets:
            return []
        k = self.keys
        keys = [k.parked, k.outbox, k.events, *(k.request(rid) for rid, _ in targets)]
        args: list[Any] = [*self.meta().argv(), due_ms, dumps(by)]
        for rid, seq in targets:
            args.extend([rid, seq])
        reply = self._run("wake", keys, args)
        return [(reply[i], int(reply[i + 1])) for i in range(0, len(reply), 2)]

    def dead_letter(
        self,
        *,
        request_id: str,
        task_name: str,
        task_id: str,
        reason: str,
        detail: str,
        deliveries: int,
        args_json: str,
        rejected_json: str,
        seq: int = 0,
        attempt: int = 0,
        result_digest: str = "",
        intake_task: str = "",
        request_json: str = "",
    ) -> tuple[str, str]:
        """Record a message the guard gave up on; finish its request if the message drove it.

        Returns:
            (dead-letter entry id, results entry id or "" when nothing was published).

        Args:
            seq, attempt, result_digest: what the message carries; the request
                is finished only if its record is at that step.
            intake_task: for a raw request message, its own task id (the
                record must have been accepted by it).
            request_json: for a raw request message, the record to create
                when none exists.
        """
        k = self.keys
        record_key = k.request(request_id) if request_id else k.request("-")
        reply = self._run(
            "dead_letter",
            [k.deadletter, k.events, record_key, k.results, k.parked, k.outbox],
            [
                *self.meta().argv(), request_id, task_name, task_id, reason, detail,
                deliveries, args_json, rejected_json, sha256_hex(rejected_json),
                self.settings.results_maxlen, self.settings.request_ttl_s, self.now_ms(),
                seq, attempt, result_digest, intake_task, request_json,
            ],
        )
        return reply[0], reply[1]

    # ------------------------------------------------------------------- delays
    def claim_due(self, zset: str, limit: int = 100) -> list[tuple[str, int]]:
        """Lease due members of ``zset``; returns (member, lease score) pairs."""
        now = self.now_ms()
        lease = now + int(self.settings.outbox_lease_s * 1000)
        members = self._run("claim_due", [zset], [now, lease, limit])
        return [(member, lease) for member in members]

    def ack_due(self, zset: str, member: str, score: int) -> bool:
        """Remove ``member`` if it still has ``score``."""
        return bool(self._run("ack_due", [zset], [member, score]))

    def arm_watchdog(self, request_id: str, seq: int, attempt: int) -> None:
        """Push an in-flight decision's outbox deadline to ``now + stuck_after_s``.

        Only an existing entry is moved (``ZADD XX``): a request that finished
        meanwhile removed its entry and must not get it back.
        """
        due = self.now_ms() + int(self.settings.stuck_after_s * 1000)
        self.client.zadd(self.keys.outbox, {outbox_member(request_id, seq, attempt): due}, xx=True)

    def redrive(self, request_id: str, seq: int, attempt: int, lease: int) -> tuple[str, str]:
        """The watchdog's step for a due outbox entry (see ``redrive.lua``).

        Returns:
            ``("decide", state)``, ``("publish", step JSON)`` or ``("gone", state)``.
        """
        k = self.keys
        reply = self._run(
            "redrive",
            [k.request(request_id), k.outbox, k.events],
            [
                *self.meta().argv(), request_id, seq, attempt, lease, self.now_ms(),
                int(self.settings.stuck_after_s * 1000), REDRIVE_DOUBLINGS,
            ],
        )
        return reply[0], reply[1]

    def followup_due_ms(self) -> int:
        """When the drainer takes over a follow-up its caller did not finish."""
        return self.now_ms() + int(self.settings.outbox_lease_s * 1000)

    def schedule_timer(self, member: str, due_ms: int) -> None:
        """(Re)arm a timer in ``gpusched:timers``."""
        self.client.zadd(self.keys.timers, {member: due_ms})

    def cancel_timer(self, member: str) -> None:
        """Disarm a timer."""
        self.client.zrem(self.keys.timers, member)

    # -------------------------------------------------------------------- guard
    def count_delivery(self, task_id: str) -> int:
        """Count one start of a task message (expires with the visibility window)."""
        return self._count(self.keys.delivery(task_id))

    def clear_delivery(self, task_id: str) -> None:
        """The message's delivery ended without its process dying: forget its crash count."""
        self.client.delete(self.keys.delivery(task_id))

    def count_error(self, task_id: str) -> int:
        """Count one unexpected exception of a task message."""
        return self._count(self.keys.task_errors(task_id))

    def clear_errors(self, task_id: str) -> None:
        """Forget a message's error count."""
        self.client.delete(self.keys.task_errors(task_id))

    def _count(self, key: str) -> int:
        ttl = self.settings.visibility_timeout_s * (self.settings.max_crashes + 2)
        pipe = self.client.pipeline(transaction=True)
        pipe.incr(key)
        pipe.expire(key, ttl)
        count, _ = pipe.execute()
        return int(count)

    # -------------------------------------------------------------------- reads
    def record(self, request_id: str) -> dict[str, str]:
        """The request record (empty when unknown or expired)."""
        return dict(self.client.hgetall(self.keys.request(request_id)))  # type: ignore[arg-type]

    def parked(self) -> dict[str, str]:
        """Parked entries by request id (raw JSON)."""
        return dict(self.client.hgetall(self.keys.parked))  # type: ignore[arg-type]


def _begun(reply: Any) -> Begun:
    if reply[0] == "ok":
        return Begun("ok", reply[1], int(reply[2]))
    if reply[0] == "resume":
        return Begun("resume", recorded=Recorded(reply[1], reply[2]))
    return Begun(reply[0])


def _record_outcome(reply: Any) -> RecordOutcome:
    if reply[0] == "ok":
        return RecordOutcome(True)
    if reply[0] == "duplicate":
        return RecordOutcome(False, Recorded(reply[1], reply[2]))
    return RecordOutcome(False)


def _reserved(reply: Any) -> Reserved:
    status = reply[0]
    if status == "booked":
        return Reserved(status, version=int(reply[1]))
    if status == "conflict":
        return Reserved(status, detail=reply[1], next_attempt=int(reply[2]))
    return Reserved(status, detail=reply[1] if len(reply) > 1 else None)


def _outcome_and_id(reply: Any) -> tuple[str, str | None]:
    return reply[0], reply[1] if len(reply) > 1 else None


def _raw(request_json: str) -> Any:
    """Embed the canonical request as JSON (not as a string) in event data."""
    return json.loads(request_json)
