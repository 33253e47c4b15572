"""The request record's lifecycle as data: its states and the table of legal transitions.

A record (``gpusched:req:<id>``, field ``state``) moves through::

    (none) → queued → deciding → decided → booked → done(scheduled)
                         │          ├──→ retrying → deciding ...     (reservation conflict)
                         │          ├──→ done(rejected)
                         │          └──→ parked → woken → deciding ... (cluster change)
                         └── (a second decider of the same attempt resumes the recorded step)

and, from any state that is not ``done``, to ``done`` when it is cancelled
or dead-lettered. Every transition is written by one Lua script (the
``step``); :data:`TRANSITIONS` lists them, and the scripts read the state
names from :func:`lua_constants` (prepended to every script, with
``lib.lua``), so Python and Lua spell each state once. A test checks every
state a script writes and every state its guards name against this table,
and a state-machine test drives the service and checks every transition it
observes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class RecordState(StrEnum):
    """The ``state`` field of a request record."""

    #: Accepted; its first decision is queued.
    QUEUED = "queued"
    #: A decider claimed the attempt (``begin``).
    DECIDING = "deciding"
    #: The core's result and the next step are recorded.
    DECIDED = "decided"
    #: The chosen GPUs are booked in the ledger; the result is not yet published.
    BOOKED = "booked"
    #: A reservation conflict: the next attempt is queued.
    RETRYING = "retrying"
    #: Unschedulable for now: waits for a cluster change that could place it.
    PARKED = "parked"
    #: A cluster change woke it: its next decision (seq + 1) is queued.
    WOKEN = "woken"
    #: Terminal: its result is published (``status`` says which).
    DONE = "done"


#: Every state, in declaration order.
ALL_STATES = frozenset(RecordState)


@dataclass(frozen=True, slots=True)
class Transition:
    """A script (``step``) may move a record from any of ``sources`` to ``target``.

    ``None`` among the sources: the record does not exist yet.
    """

    step: str
    sources: frozenset[RecordState | None]
    target: RecordState


def _transition(step: str, sources: Iterable[RecordState | None], target: RecordState) -> Transition:
    return Transition(step, frozenset(sources), target)


_S = RecordState
#: A record that is not terminal: what a cancel finishes.
_LIVE = ALL_STATES - {_S.DONE}

#: The legal transitions, one per (script, target).
TRANSITIONS: tuple[Transition, ...] = (
    _transition("accept", {None}, _S.QUEUED),
    _transition("begin", {_S.QUEUED, _S.RETRYING, _S.WOKEN, _S.DECIDING}, _S.DECIDING),
    _transition("record_decision", {_S.DECIDING}, _S.DECIDED),
    _transition("reserve", {_S.DECIDED}, _S.BOOKED),
    _transition("reserve", {_S.DECIDED}, _S.RETRYING),
    _transition("park", {_S.DECIDED}, _S.PARKED),
    # the cluster changed while it was being decided: decide again at once
    _transition("park", {_S.DECIDED}, _S.WOKEN),
    _transition("wake", {_S.PARKED}, _S.WOKEN),
    # scheduled from booked, rejected (the core rejected the stored request) from decided
    _transition("publish", {_S.DECIDED, _S.BOOKED}, _S.DONE),
    _transition("expire_parked", {_S.PARKED}, _S.DONE),
    _transition("cancel", _LIVE, _S.DONE),
    # a message no task can use: its record (or, for a raw request, a new one) is finished
    _transition("dead_letter", {None, *(_LIVE - {_S.PARKED})}, _S.DONE),
    # a request rejected at intake: recorded and finished at once
    _transition("reject", {None}, _S.DONE),
    # rebuilding after a data loss: whatever the (rolled-back) record said is overwritten
    _transition("restore_booking", {None, *ALL_STATES}, _S.DONE),
)


def steps_to(target: RecordState) -> frozenset[str]:
    """The scripts that may write ``target``."""
    return frozenset(t.step for t in TRANSITIONS if t.target is target)


def is_legal(step: str, source: RecordState | None, target: RecordState) -> bool:
    """True when script ``step`` may move a record from ``source`` to ``target``."""
    return any(t.step == step and t.target is target and source in t.sources for t in TRANSITIONS)


def lua_constants() -> str:
    """The Lua chunk that defines ``STATE.<NAME>`` for every state (prepended to every script)."""
    fields = ", ".join(f"{state.name} = '{state.value}'" for state in RecordState)
    return f"-- generated from tasks.base.lifecycle.RecordState\nlocal STATE = {{{fields}}}\n"
