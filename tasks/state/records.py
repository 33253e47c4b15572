"""Request records (``gpusched:req:<id>``): accept a request, claim an attempt, record its decision.

A record moves through the states of :class:`tasks.base.lifecycle.RecordState`
by the transitions of :data:`tasks.base.lifecycle.TRANSITIONS`.

Every write is one Lua script guarded by the record's ``state``/``seq``/
``attempt`` (and, for the later steps, the recorded decision's result
digest), so each is safe to repeat. The other steps of a record's life are
written by :mod:`tasks.state.cluster_store` (booking),
:mod:`tasks.state.results` (publishing), :mod:`tasks.state.parked` (parking,
waking), :mod:`tasks.state.delays` (re-driving) and
:mod:`tasks.state.deliveries` (dead-lettering).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tasks.base.events import dumps, embedded_json
from tasks.state.partition import Partition
from tasks.state.scripts import ScriptCall


@dataclass(frozen=True, slots=True)
class Accepted:
    """Outcome of :meth:`RequestRecords.accept` (for a known id: what the known record says).

    ``conflict`` is true when the known id holds a different request
    (``stored_digest`` is its digest); a duplicate holds the same one.
    """

    accepted: bool
    state: str = ""
    intake_task: str = ""
    reschedule_of: str = ""
    conflict: bool = False
    stored_digest: str = ""


@dataclass(frozen=True, slots=True)
class Recorded:
    """A decision attempt that is already decided: its record state and its step JSON."""

    state: str
    step_json: str


@dataclass(frozen=True, slots=True)
class RecordOutcome:
    """Outcome of a ``record_decision`` call; true when this decision was recorded.

    ``earlier`` is the decision another decider recorded first for the same
    attempt (continue with its step), None when the record moved on.
    ``outdated``: refused because it read a version older than the newest audit
    checkpoint (decide again on a fresh snapshot).
    """

    recorded: bool
    earlier: Recorded | None = None
    outdated: bool = False

    def __bool__(self) -> bool:
        return self.recorded


@dataclass(frozen=True, slots=True)
class Begun:
    """Outcome of a ``begin`` call.

    ``ok`` carries the request JSON, the wake epoch and when the request was
    accepted (ms); ``resume`` the decision already recorded for this attempt
    (continue with it).
    """

    status: str
    request_json: str | None = None
    epoch: int = 0
    recorded: Recorded | None = None
    created_ms: int = 0


class RequestRecords:
    """Creating records, claiming decision attempts and recording decisions."""

    def __init__(self, partition: Partition) -> None:
        self._partition = partition

    def accept(self, request_id: str, request_json: str, digest: str, **options: Any) -> Accepted:
        """Create the record of a new request: :meth:`accept_call`, run on its own."""
        return self._partition.call(self.accept_call(request_id, request_json, digest, **options))

    def accept_call(
        self,
        request_id: str,
        request_json: str,
        digest: str,
        *,
        intake_task: str = "",
        pinned: bool = False,
        reschedule_of: str = "",
        rescheduled_data: str = "",
        replaces: str = "",
        outbox_due_ms: int | None = None,
    ) -> ScriptCall[Accepted]:
        """Create the record of a new request (idempotent on ``request_id``; see ``accept.lua``).

        A known id is never overwritten: the same request answers a duplicate,
        a different one (another digest) a conflict. A call to queue on a batch
        (many requests in one round trip), or to run with :meth:`accept`.

        Args:
            intake_task: the task id of the message that carried a raw request ("" for none).
            pinned: the request pins its GPUs (a reschedule waits for them).
            reschedule_of: ``<instance key>@<booked version>`` of the booking
                this request replaces ("" for a submitted request).
            rescheduled_data: data of the ``sched.instance.rescheduled`` event
                written with the record ("" for none).
            replaces: the request whose booking this one reschedules ("" for
                none); its results entries carry it as ``reschedule_of``.
            outbox_due_ms: when the watchdog drives the request if no message does.
        """
        p = self._partition
        data = dumps(
            {"digest": digest, "request": embedded_json(request_json), "reschedule_of": reschedule_of}
        )
        return ScriptCall(
            "accept",
            [p.keys.request(request_id), p.keys.events, p.keys.outbox],
            [
                *p.meta().argv(), request_id, request_json, digest, intake_task,
                p.now_ms(), data, "" if outbox_due_ms is None else outbox_due_ms,
                "1" if pinned else "0", reschedule_of, rescheduled_data, replaces,
            ],
            _accepted,
        )

    def begin_call(self, request_id: str, seq: int, attempt: int, task_id: str) -> ScriptCall[Begun]:
        """Claim decision ``(seq, attempt)`` (see ``begin.lua``)."""
        p = self._partition
        keys = [p.keys.request(request_id), p.keys.epoch]
        return ScriptCall("begin", keys, [seq, attempt, task_id, p.now_ms()], _begun)

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
        *,
        booked_by: str | None = None,
    ) -> ScriptCall[RecordOutcome]:
        """Store the core's result and step, write ``sched.decision.made`` (first writer wins;
        refused as outdated when it read a version below the decision floor, or, with
        ``booked_by``, unless the cluster is still at ``version`` and request ``booked_by``'s
        booking made it)."""
        p = self._partition
        k = p.keys
        args = [
            *p.meta().argv(), request_id, seq, attempt, version, result_json, result_digest,
            event_data, p.now_ms(), step_json, "" if booked_by is None else version,
        ]
        booker = k.request(booked_by if booked_by is not None else request_id)  # unread without booked_by
        keys = [k.request(request_id), k.events, k.decision_floor, k.version, booker]
        return ScriptCall("record_decision", keys, args, _record_outcome)

    def record(self, request_id: str) -> dict[str, str]:
        """The request record (empty when unknown or expired)."""
        p = self._partition
        return dict(p.client.hgetall(p.keys.request(request_id)))  # type: ignore[arg-type]


def _accepted(reply: Any) -> Accepted:
    if reply[0] == "accepted":
        return Accepted(True)
    return Accepted(False, reply[1], reply[2], reply[3], reply[0] == "conflict", reply[4])


def _begun(reply: Any) -> Begun:
    if reply[0] == "ok":
        return Begun("ok", reply[1], int(reply[2]), created_ms=int(reply[3] or 0))
    if reply[0] == "resume":
        return Begun("resume", recorded=Recorded(reply[1], reply[2]))
    return Begun(reply[0])


def _record_outcome(reply: Any) -> RecordOutcome:
    if reply[0] == "ok":
        return RecordOutcome(True)
    if reply[0] == "duplicate":
        return RecordOutcome(False, Recorded(reply[1], reply[2]))
    return RecordOutcome(False, outdated=reply[0] == "outdated")
