"""Committing one decision: its record, its booking and its final step, queued on a pipeline.

A decision's commit is three Lua scripts, each checking its own guard:
``record_decision.lua`` (the first decision recorded for the attempt wins),
``reserve.lua`` (every GPU fits, or nothing is booked) and ``publish.lua`` or
``park.lua``. :class:`Commit` queues them on a caller's
:class:`~tasks.state.scripts.Batch` in two parts — the record and the booking
(:meth:`Commit.queue_booking`), then the final step (:meth:`Commit.queue_final`)
— so that a caller can release the decide lease in between (the next
decider's snapshot then holds the booking) and can commit many decisions in
one round trip (:mod:`tasks.decision.batch`). :meth:`Commit.progress` reads the
replies once the batch executed, exactly as a decision committed alone does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from tasks.base.step import PUBLISH, RESERVE, Step, resumed_step
from tasks.decision.lease import DecideLease
from tasks.decision.publish import after_final, final_call, publish
from tasks.decision.reserve import after_reserve, reserve_call
from tasks.state.cluster_store import Reserved
from tasks.state.context import Runtime
from tasks.state.outages import outage_of
from tasks.state.partition import OutcomeReply
from tasks.state.records import Recorded, RecordOutcome
from tasks.state.scripts import Batch, Pending, ScriptCall


@dataclass(frozen=True, slots=True)
class Progress:
    """How far one decide message got.

    ``step`` is what the next stage continues with (None: nothing left for this
    message); ``outcome`` is the publish or park outcome when this message
    finished the request itself; ``created_ms`` is when the request was
    accepted (0 when this message did not decide it).
    """

    step: Step | None
    outcome: str | None = None
    created_ms: int = field(default=0, compare=False)  # for the latency metric, not the outcome
    #: The record refused the decision as outdated (decide again on a fresh snapshot).
    outdated: bool = False


def resumed(recorded: Recorded, seq: int, attempt: int) -> Step | None:
    """The step to continue with from a decision another delivery recorded (None: none)."""
    return resumed_step(recorded.state, recorded.step_json, seq, attempt)


@contextmanager
def decide_lease(rt: Runtime) -> Iterator[DecideLease | None]:
    """The decide lease of one decision round (None with ``decide_lock`` off), released on exit.

    Released also when a reply was lost or an error came first; not waited for when the
    soft time limit fired while Redis did not answer (waiting again would reach the hard
    limit, which kills the pool process): the lease then expires on its own.
    """
    lease = DecideLease(rt.client, rt.keys, rt.settings) if rt.settings.decide_lock else None
    try:
        yield lease
    except BaseException as error:
        if lease is not None and outage_of(error) == "stalled":
            lease.released()
        raise
    finally:
        if lease is not None and lease.may_hold:
            rt.partition.call(lease.release_call())
            lease.released()


class Commit:
    """The calls committing one step, and their replies once the batch executed."""

    __slots__ = ("_final", "_last", "_recorded", "_reserved", "step")

    def __init__(self, step: Step) -> None:
        self.step = step
        self._last = step
        self._recorded: Pending[RecordOutcome] | None = None
        self._reserved: Pending[Reserved] | None = None
        self._final: Pending[OutcomeReply] | None = None

    @property
    def books(self) -> bool:
        """Whether :meth:`queue_booking` queued a reservation."""
        return self._reserved is not None

    def queue_booking(
        self, rt: Runtime, batch: Batch, record: ScriptCall[RecordOutcome] | None, *, books: bool
    ) -> None:
        """Queue the decision's record (if new) and, when ``books``, its reservation."""
        step = self.step
        books = books and step.action == RESERVE and step.booking is not None
        self._last = replace(step, action=PUBLISH) if books else step
        self._recorded = batch.script(record) if record is not None else None
        self._reserved = batch.script(reserve_call(rt, step)) if books else None

    def queue_final(self, rt: Runtime, batch: Batch) -> None:
        """Queue the publish or park call of the step after its booking (if it has one)."""
        final = final_call(rt, self._last)
        self._final = batch.script(final) if final is not None else None

    def outdated(self) -> bool:
        """The record refused the decision as outdated (nothing of it was written)."""
        outcome = self._recorded.value if self._recorded is not None else None
        return outcome is not None and not outcome.recorded and outcome.outdated

    def booked_version(self) -> int | None:
        """The cluster version the reservation produced (None: it booked nothing now)."""
        reply = self._reserved.value if self._reserved is not None else None
        return reply.version if reply is not None and reply.status == "booked" else None

    def progress(self, rt: Runtime, *, finish: bool) -> Progress:
        """What the replies say, acting on them as a decision committed alone does.

        A conflicting booking queues its retry; a park the cluster overtook
        queues its new decision; conflicts exhausted park now. Call once, after
        the batch executed.
        """
        step = self.step
        recorded = self._recorded.value if self._recorded is not None else None
        if recorded is not None and not recorded.recorded:
            if recorded.outdated:
                return Progress(None, outdated=True)
            earlier = recorded.earlier
            return Progress(resumed(earlier, step.seq, step.attempt) if earlier else None)
        after = after_reserve(rt, step, self._reserved.value) if self._reserved is not None else step
        if not finish or after is None:
            return Progress(after)
        if self._final is not None and after.action == self._last.action:
            return Progress(None, after_final(rt, after, self._final.value))
        return Progress(None, publish(rt, after))  # e.g. conflicts exhausted: park now
