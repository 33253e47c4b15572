"""The decider presence (one active node, the others standing by) and the consumer following the gate.

The presence on fakeredis (its TTL expired by deleting the key, as Redis would); the gate
followed on a recorded consumer, since the real one is exercised with real workers in
``tests/service/test_decider_standby.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import fakeredis

from tasks.base.keys import Keys
from tasks.runtime.standby import DeciderGate, Presence, follow_gate
from tasks.state.scripts import Scripts

KEYS = Keys(None)
DECISION_QUEUES = frozenset({KEYS.requests_queue, KEYS.commits_queue})


def _presence(client: fakeredis.FakeRedis, me: str) -> Presence:
    return Presence(Scripts(client), KEYS, ttl_s=3.0, gate=DeciderGate(), me=me)


def test_the_first_node_takes_the_presence_the_second_stands_by_until_it_lapses() -> None:
    client = fakeredis.FakeRedis(decode_responses=True)
    a, b = _presence(client, "a"), _presence(client, "b")
    assert a.refresh() and not b.refresh()
    assert a.gate.held() == frozenset() and b.gate.held() == DECISION_QUEUES
    assert client.get(KEYS.decider) == "a" and 0 < client.pttl(KEYS.decider) <= 3000

    client.pexpire(KEYS.decider, 10)
    assert a.refresh()  # renewed: ours, its TTL back to the full 3 s
    assert client.pttl(KEYS.decider) > 10

    client.delete(KEYS.decider)  # lapsed (a's main process stopped renewing)
    assert b.refresh() and not a.refresh()  # b took it; a learns it and stands by
    assert a.gate.held() == DECISION_QUEUES and b.gate.held() == frozenset()


def test_a_node_hands_back_only_its_own_presence() -> None:
    client = fakeredis.FakeRedis(decode_responses=True)
    a, b = _presence(client, "a"), _presence(client, "b")
    a.refresh()
    b.refresh()
    b.hand_back()  # not b's: left alone
    assert client.get(KEYS.decider) == "a"
    a.hand_back()
    assert client.get(KEYS.decider) is None and a.gate.held() == DECISION_QUEUES
    assert b.refresh()  # the standby takes it at its next refresh


@dataclass
class _TaskConsumer:
    queues: set[str]

    def consuming_from(self, name: str) -> bool:
        return name in self.queues


@dataclass
class _Consumer:
    """What :func:`follow_gate` uses of Celery's consumer, recording the calls."""

    task_consumer: _TaskConsumer | None
    calls: list[tuple[str, str]] = field(default_factory=list)

    def cancel_task_queue(self, name: str) -> None:
        self.calls.append(("cancel", name))
        assert self.task_consumer is not None
        self.task_consumer.queues.discard(name)

    def add_task_queue(self, name: str) -> None:
        self.calls.append(("add", name))
        assert self.task_consumer is not None
        self.task_consumer.queues.add(name)


def test_the_consumer_cancels_and_resumes_the_decision_queues_as_the_gate_says() -> None:
    names = KEYS.queues
    consumer = _Consumer(_TaskConsumer(set(names)))
    gate = DeciderGate()
    gate.stand_by(KEYS)
    follow_gate(consumer, names, gate)
    follow_gate(consumer, names, gate)  # nothing more to do
    assert consumer.calls == [("cancel", KEYS.commits_queue), ("cancel", KEYS.requests_queue)]
    assert consumer.task_consumer is not None and consumer.task_consumer.queues == {KEYS.cluster_queue}

    gate.activate()
    consumer.calls.clear()
    follow_gate(consumer, names, gate)
    assert consumer.calls == [("add", KEYS.commits_queue), ("add", KEYS.requests_queue)]

    restarting = _Consumer(None)  # between a lost connection and the consumer's restart
    follow_gate(restarting, names, gate)
    assert restarting.calls == []
