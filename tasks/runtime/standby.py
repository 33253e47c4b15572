"""One active decider per partition, the other worker nodes standing by (``decider_standby``).

The decide lease already runs a partition's decisions one at a time, so a second worker
node that also takes decision messages adds nothing but contention: each must absorb the
other's bookings into its memo, and on a small machine both slow down (docs/service.md,
*Performance*). With ``decider_standby`` on, a node consumes the decision queues
(``requests``, ``commits``) only while it holds the partition's decider presence
(:attr:`tasks.base.keys.Keys.decider`: its node id with a TTL of ``decider_presence_ttl_s``,
taken and renewed three times per TTL by the main process, whatever the pool is doing, in
one atomic step: ``decider_presence.lua``); the others
consume the cluster queue only and take the presence, and with it the decision queues,
once it expires (a dead, frozen or partitioned active node) or is handed back (a node
shutting down deletes its presence, so a standby takes over within a third of the TTL).

The presence is advice, not a lock: the lease still serialises every decision, so two
nodes that both believe they are active for a moment (a renewal racing an expiry, a
frozen node thawing) are correct, only slower. A node that cannot reach Redis keeps its
role until it can.

How: the presence thread (:mod:`tasks.runtime.middleware.decider_standby`) writes
:data:`GATE`, one frozen set of queue names swapped whole; :class:`FollowTheGate`, a step
of Celery's consumer, reads it every :data:`FOLLOW_S` on the consumer's own timer and
cancels or resumes those queues through the consumer's public ``cancel_task_queue`` and
``add_task_queue`` (what Celery's remote ``cancel_consumer``/``add_consumer`` do). It
runs first before the consumer's loop starts, so a node that boots next to an active one
takes no decision message; it is installed again whenever the consumer restarts (a lost
broker connection), so the queues follow the gate after a reconnect too. A message the
node had already taken when it stood down is decided by it (under the lease, as always).
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from typing import Any

from celery import bootsteps  # type: ignore[import-untyped]

from tasks.base.keys import Keys
from tasks.base.logging import get_logger
from tasks.base.settings import get_settings
from tasks.state.scripts import ScriptCall, Scripts

log = get_logger(__name__)


def node_id() -> str:
    """This node's presence value: ``<host>:<pid>:<random>`` (a restarted node is a new one)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class DeciderGate:
    """Which queues this node's consumer leaves alone (none unless standing by).

    Until the presence thread decided (the node's first ``BRPOP`` may come first), a node
    with ``decider_standby`` on stands by: it takes no decision before it knows it is active.
    """

    held_back: frozenset[str] | None = None

    def held(self) -> frozenset[str]:
        """The queues to leave alone now."""
        held = self.held_back
        if held is None:
            settings = get_settings()
            if settings.decider_standby:
                self.stand_by(Keys(settings.cluster))
            else:
                self.activate()
            held = self.held_back
        return held or frozenset()

    def stand_by(self, keys: Keys) -> None:
        self.held_back = frozenset({keys.requests_queue, keys.commits_queue})

    def activate(self) -> None:
        self.held_back = frozenset()


#: The gate of this process's consumer.
GATE = DeciderGate()


@dataclass
class Presence:
    """This node's claim on the partition's decider presence."""

    scripts: Scripts
    keys: Keys
    ttl_s: float
    gate: DeciderGate = field(default_factory=lambda: GATE)
    me: str = field(default_factory=node_id)
    active: bool = False

    def refresh(self) -> bool:
        """Take the presence if it is free, renew it if it is ours, stand by otherwise;
        returns whether this node is the active decider (the gate follows)."""
        self._become(self.scripts.call(self._call(max(1, int(self.ttl_s * 1000)))))
        return self.active

    def hand_back(self) -> None:
        """On shutdown: delete the presence if it is ours (a standby takes over at once)."""
        self.scripts.call(self._call(0))
        self._become(False)

    def _call(self, ttl_ms: int) -> ScriptCall[bool]:
        return ScriptCall("decider_presence", [self.keys.decider], [self.me, ttl_ms], bool)

    def _become(self, active: bool) -> None:
        if active:
            self.gate.activate()
        else:
            self.gate.stand_by(self.keys)
        if active != self.active:
            log.info("decider_active" if active else "decider_standing_by", node=self.me)
        self.active = active


#: How often the consumer compares its queues with the gate (seconds; a few set lookups).
FOLLOW_S = 0.2


def follow_gate(consumer: Any, names: tuple[str, ...], gate: DeciderGate = GATE) -> None:
    """Cancel the queues of ``names`` the gate holds back, resume the others it no longer does."""
    tasks = consumer.task_consumer
    if tasks is None:  # between a connection loss and the consumer's restart
        return
    held = gate.held()
    for name in names:
        consuming = tasks.consuming_from(name)
        if name in held and consuming:
            consumer.cancel_task_queue(name)
        elif name not in held and not consuming:
            consumer.add_task_queue(name)


class FollowTheGate(bootsteps.StartStopStep):  # type: ignore[misc]
    """Celery consumer step: the task consumer's queues follow :data:`GATE` (``decider_standby``)."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.entry: Any = None
        self.names: tuple[str, ...] = ()

    def start(self, parent: Any) -> None:
        """Follow the gate now (before the loop takes anything), then every :data:`FOLLOW_S`."""
        if not get_settings().decider_standby:
            return
        if not self.names:  # the node's own queues (-Q), before any was cancelled
            self.names = tuple(parent.app.amqp.queues.consume_from)
        follow_gate(parent, self.names)
        self.entry = parent.timer.call_repeatedly(FOLLOW_S, follow_gate, (parent, self.names))

    def stop(self, parent: Any) -> None:
        """Stop following (the consumer is closing or restarting)."""
        if self.entry is not None:
            parent.timer.cancel(self.entry)
            self.entry = None

    shutdown = stop
