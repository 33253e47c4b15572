"""Request records, results, parking, delays and the redelivery guard in Redis.

Thin typed wrappers over the Lua scripts in :mod:`tasks.scripts`; every
method is one atomic step and is safe to repeat (the scripts guard on the
record's ``state``/``seq``/``attempt``). A request record moves through::

    queued → deciding → decided → booked → done(scheduled)
                 │          └──→ retrying → deciding ...     (reservation conflict)
                 ├──→ done(rejected)
                 └──→ parked → woken → deciding ...          (cluster change)

Cluster mutations live in :mod:`tasks.cluster_store`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from tasks.keys import Keys
from tasks.scripts import Scripts
from tasks.settings import Settings
from tasks.streams import EventMeta, default_source, dumps

#: Clock returning seconds since the epoch (injectable for tests).
Clock = Callable[[], float]


def outbox_member(request_id: str, seq: int, attempt: int) -> str:
    """Outbox member naming one decision attempt."""
    return f"{request_id}|{seq}|{attempt}"


def parse_outbox_member(member: str) -> tuple[str, int, int]:
    """Inverse of :func:`outbox_member` (request ids may contain ``|``)."""
    request_id, seq, attempt = member.rsplit("|", 2)
    return request_id, int(seq), int(attempt)


@dataclass(frozen=True, slots=True)
class Accepted:
    """Outcome of :meth:`Store.accept`."""

    accepted: bool
    state: str = ""
    intake_task: str = ""
    seq: int = 0
    attempt: int = 0


@dataclass(frozen=True, slots=True)
class Begun:
    """Outcome of :meth:`Store.begin`: ``ok`` carries the request JSON and wake epoch."""

    status: str
    request_json: str | None = None
    epoch: int = 0
    state: str | None = None


@dataclass(frozen=True, slots=True)
class Reserved:
    """Outcome of :meth:`Store.reserve`."""

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
        outbox_due_ms: int | None = None,
    ) -> Accepted:
        """Create the record of a new request (idempotent on ``request_id``)."""
        data = dumps({"digest": digest, "request": _raw(request_json), "reschedule_of": reschedule_of})
        reply = self._run(
            "accept",
            [self.keys.request(request_id), self.keys.events, self.keys.outbox],
            [
                *self.meta().argv(), request_id, request_json, digest, intake_task,
                self.now_ms(), data, "" if outbox_due_ms is None else outbox_due_ms,
                "1" if pinned else "0", reschedule_of,
            ],
        )
        if reply[0] == "accepted":
            return Accepted(True)
        return Accepted(False, reply[1], reply[2], int(reply[3] or 0), int(reply[4] or 0))

    def begin(self, request_id: str, seq: int, attempt: int, task_id: str) -> Begun:
        """Claim decision ``(seq, attempt)``; ``ok`` returns the stored request JSON."""
        reply = self._run(
            "begin",
            [self.keys.request(request_id), self.keys.epoch],
            [seq, attempt, task_id, self.now_ms()],
        )
        if reply[0] == "ok":
            return Begun("ok", reply[1], int(reply[2]))
        return Begun(reply[0], state=reply[1] if len(reply) > 1 else None)

    def record_decision(
        self,
        request_id: str,
        seq: int,
        attempt: int,
        version: int,
        result_json: str,
        result_digest: str,
        event_data: str,
    ) -> bool:
        """Store the core's result and write ``sched.decision.made``; False if superseded."""
        reply = self._run(
            "record_decision",
            [self.keys.request(request_id), self.keys.events],
            [
                *self.meta().argv(), request_id, seq, attempt, version, result_json,
                result_digest, event_data, self.now_ms(),
            ],
        )
        return bool(reply[0] == "ok")

    def reserve(
        self,
        request_id: str,
        seq: int,
        attempt: int,
        booking: Booking,
        retry_due_ms: int,
        retried_data: str,
    ) -> Reserved:
        """Book all claims of ``booking`` or none (see ``reserve.lua``)."""
        k = self.keys
        reply = self._run(
            "reserve",
            [
                k.request(request_id), k.capacity, k.booked, k.instances, k.instance_meta,
                k.claims, k.version, k.changes, k.events, k.outbox,
            ],
            [
                *self.meta().argv(), request_id, seq, attempt, booking.instance_key,
                booking.row_json, booking.meta_json, booking.claims, booking.event_data,
                self.settings.conflict_max_attempts, retry_due_ms,
                self.settings.changes_maxlen, self.now_ms(), retried_data,
            ],
        )
        status = reply[0]
        if status == "booked":
            return Reserved(status, version=int(reply[1]))
        if status == "conflict":
            return Reserved(status, detail=reply[1], next_attempt=int(reply[2]))
        return Reserved(status, detail=reply[1] if len(reply) > 1 else None)

    def publish(
        self,
        request_id: str,
        status: str,
        *,
        result_json: str = "",
        result_digest: str = "",
        seq: int | None = None,
        rejected_data: str = "",
        request_json: str = "",
    ) -> tuple[str, str | None]:
        """Publish the terminal result once; returns (outcome, results entry id)."""
        k = self.keys
        reply = self._run(
            "publish",
            [k.request(request_id), k.results, k.events, k.parked, k.outbox],
            [
                *self.meta().argv(), request_id, status, result_json,
                "" if seq is None else seq, self.settings.results_maxlen,
                self.settings.request_ttl_s, self.now_ms(), result_digest, rejected_data,
                request_json,
            ],
        )
        return reply[0], reply[1] if len(reply) > 1 else None

    def park(
        self,
        request_id: str,
        seq: int,
        attempt: int,
        *,
        parked_entry: str,
        notice_json: str,
        event_data: str,
        epoch: int,
        requeue_due_ms: int,
        announce: bool = True,
    ) -> tuple[str, str | None]:
        """Park the request, or requeue it if the cluster changed meanwhile (see ``park.lua``)."""
        k = self.keys
        reply = self._run(
            "park",
            [k.request(request_id), k.parked, k.results, k.events, k.epoch, k.outbox],
            [
                *self.meta().argv(), request_id, seq, attempt, parked_entry, notice_json,
                self.settings.results_maxlen, event_data, self.now_ms(), epoch, requeue_due_ms,
                "1" if announce else "0",
            ],
        )
        return reply[0], reply[1] if len(reply) > 1 else None

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
        request_json: str = "",
    ) -> tuple[str, str]:
        """Record a message the guard gave up on; reject its request if unfinished."""
        k = self.keys
        record_key = k.request(request_id) if request_id else k.request("-")
        reply = self._run(
            "dead_letter",
            [k.deadletter, k.events, record_key, k.results, k.parked, k.outbox],
            [
                *self.meta().argv(), request_id, task_name, task_id, reason, detail,
                deliveries, args_json, rejected_json, self.settings.results_maxlen,
                self.settings.request_ttl_s, self.now_ms(), request_json,
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
        """The message completed: forget its crash count."""
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

    def records(self, request_ids: Iterable[str]) -> list[dict[str, str]]:
        """Several records in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for rid in request_ids:
            pipe.hgetall(self.keys.request(rid))
        return [dict(r) for r in pipe.execute()]


def _raw(request_json: str) -> Any:
    """Embed the canonical request as JSON (not as a string) in event data."""
    return json.loads(request_json)
