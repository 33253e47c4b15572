"""A state-machine test of the request record's lifecycle over the fakeredis harness.

Hypothesis drives the service (submit, decide, two decisions on one snapshot
so that they conflict, park on a full cluster, wake by a new worker or a
release, cancel, move a placement off a removed worker, time passing) while
a tracer reads every record's ``state`` before and after every script call
and every batch. Each change must be a transition of
:data:`tasks.base.lifecycle.TRANSITIONS` by a script that ran (a batch may
move a record through several, in order), and nothing but a script may
change a state.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from builders import RTX_4090, uniform_worker
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from service_builders import small_request, uniform_cluster

from tasks.audit.retention import expire_parked
from tasks.base.lifecycle import TRANSITIONS, RecordState
from tasks.base.step import Step
from tasks.decision.decide import decide, resume
from tasks.flows.cancels import cancel_request
from tasks.state.scripts import Batch, Scripts
from tasks.testing import Harness, booking_violations, isolated_settings

#: Request ids the machine draws from (a small pool, so that ids repeat: duplicates, cancels of known ids).
IDS = [f"r{i}" for i in range(6)]
States = dict[str, RecordState | None]
#: What a submitted request is: placeable, rejected by the core once stored, rejected at intake.
REQUESTS: dict[str, dict[str, Any]] = {
    "small": {},
    "core_rejected": {"model": small_request("x", backend_parameters=["--tp-size", "0"])["model"]},
    "intake_rejected": {"model": {"name": "m", "replicas": -1}},
}
#: Mostly placeable requests (they fill the cluster, so that others park and conflict).
KINDS = ["small", "small", "small", "small", "core_rejected", "intake_rejected"]


def reachable(before: RecordState | None, steps: list[str]) -> set[RecordState | None]:
    """The states a record at ``before`` may be in after ``steps`` ran in order (each may leave it)."""
    reach = {before}
    for step in steps:
        reach |= {t.target for t in TRANSITIONS if t.step == step for s in reach if s in t.sources}
    return reach


class Tracer:
    """Every record's state around every script call; the illegal changes it saw."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.last: States = {}
        self.queued: dict[int, list[str]] = {}
        self.illegal: list[str] = []
        self.seen: set[tuple[RecordState | None, RecordState | None]] = set()

    def states(self) -> States:
        client, prefix = self.h.rt.client, self.h.rt.keys.request("")
        keys = client.scan_iter(f"{prefix}*")
        return {key.removeprefix(prefix): _state(client.hget(key, "state")) for key in keys}

    def around(self, steps: list[str], run: Any) -> Any:
        before = self.states()
        self._check(self.last, before, [], "outside any script")
        try:
            return run()
        finally:
            self.last = self.states()
            self._check(before, self.last, steps, "+".join(steps) or "a batch of commands")

    def _check(self, before: States, after: States, steps: list[str], by: str) -> None:
        for rid in sorted(set(before) | set(after)):
            old, new = before.get(rid), after.get(rid)
            if old == new:
                continue
            self.seen.add((old, new))
            if new not in reachable(old, steps):
                self.illegal.append(f"{rid}: {old} -> {new} by {by}")

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Wrap :meth:`Scripts.run`, :meth:`Batch.script` and :meth:`Batch.execute` (the doors to Redis)."""
        run, queue, execute = Scripts.run, Batch.script, Batch.execute

        def traced_run(scripts: Scripts, name: str, keys: list[str], args: list[Any]) -> Any:
            return self.around([name], lambda: run(scripts, name, keys, args))

        def traced_script(batch: Batch, call: Any) -> Any:
            self.queued.setdefault(id(batch), []).append(call.name)
            return queue(batch, call)

        def traced_execute(batch: Batch) -> None:
            self.around(self.queued.pop(id(batch), []), lambda: execute(batch))

        with (
            mock.patch.object(Scripts, "run", traced_run),
            mock.patch.object(Batch, "script", traced_script),
            mock.patch.object(Batch, "execute", traced_execute),
        ):
            yield


def _state(value: str | None) -> RecordState | None:
    return None if value is None else RecordState(value)


class RecordLifecycle(RuleBasedStateMachine):
    """The service on one small cluster (one 4090: one small request fits), driven at random."""

    def __init__(self) -> None:
        super().__init__()
        self.h = Harness(settings=isolated_settings(
            decide_lock=False, conflict_max_attempts=2, conflict_retry_after_s=1,
            unreachable_grace_s=0, ready_stable_s=0, parked_ttl_s=30,
        ))
        self.tracer = Tracer(self.h)
        self.patches = self.tracer.installed()
        self.patches.__enter__()
        self.h.apply(uniform_cluster(workers=1, gpus=1))
        self.next_worker = 2

    def teardown(self) -> None:
        self.patches.__exit__(None, None, None)

    @rule(rid=st.sampled_from(IDS), kind=st.sampled_from(KINDS))
    def submit(self, rid: str, kind: str) -> None:
        self.h.submit({**small_request(rid), **REQUESTS[kind]})

    @precondition(lambda self: bool(self.h.queue))
    @rule()
    def decide_one(self) -> None:
        self.h.run_decision(self.h.queue.popleft())

    @precondition(lambda self: len(self.h.queue) >= 2)
    @rule()
    def decide_two_on_one_snapshot(self) -> None:
        """Both decide before either books: the second may conflict (retry, then park)."""
        items = [self.h.queue.popleft(), self.h.queue.popleft()]
        steps = [decide(self.h.rt, i.request_id, i.seq, i.attempt, f"t{n}") for n, i in enumerate(items)]
        for step in steps:
            if step is not None:
                resume(self.h.rt, step)

    @precondition(lambda self: bool(self.h.queue))
    @rule()
    def cluster_changes_during_a_decision(self) -> None:
        """A worker joins between the decision and its step: a park becomes a wake at once."""
        item = self.h.queue.popleft()
        step = decide(self.h.rt, item.request_id, item.seq, item.attempt, "t")
        self.add_worker()
        if step is not None:
            resume(self.h.rt, step)

    @rule(rid=st.sampled_from(IDS))
    def cancel(self, rid: str) -> None:
        cancel_request(self.h.rt, rid)

    @rule(rid=st.sampled_from(IDS))
    def release(self, rid: str) -> None:
        """The control plane deleted the instance placed for ``rid`` (wakes what it frees room for).

        This rule and the next two then run the queued decisions (Hypothesis
        disables some rules in each example, so none relies on ``decide_one``).
        """
        self.h.event({"kind": "instance_deleted", "request_id": rid})
        self.h.pump()

    @rule()
    def add_worker(self) -> None:
        """A new worker joins (wakes parked requests it could place)."""
        worker = uniform_worker(self.next_worker, f"w{self.next_worker}", 1, RTX_4090)
        self.next_worker += 1
        self.h.event({"kind": "worker_added", "worker": worker})

    @rule()
    def remove_first_worker(self) -> None:
        """The first worker left: its bookings are released and moved (rescheduled as ``<id>~1``)."""
        self.h.event({"kind": "worker_removed", "worker_id": 1})
        self.h.pump()

    @rule(seconds=st.sampled_from([1, 5, 31]))
    def time_passes(self, seconds: int) -> None:
        """Retries fall due, watchdogs re-drive, parked requests expire (the drainer's pass, the retention's
        expiry); then the queued decisions run."""
        self.h.clock.advance(seconds)
        self.h.drain()
        expire_parked(self.h.rt)
        self.h.pump()

    @invariant()
    def every_transition_is_legal(self) -> None:
        assert self.tracer.illegal == []

    @invariant()
    def the_ledger_books_no_gpu_twice(self) -> None:
        assert booking_violations(self.h.rt) == []


RecordLifecycle.TestCase.settings = settings(
    max_examples=30, stateful_step_count=40, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
test_record_lifecycle = RecordLifecycle.TestCase


def test_the_tracer_reports_a_state_written_outside_a_script() -> None:
    """The check itself: a state set by hand, or by the wrong script, is reported."""
    h = Harness()
    tracer = Tracer(h)
    with tracer.installed():
        h.apply(uniform_cluster())
        h.submit(small_request("a"))
        h.rt.client.hset(h.rt.keys.request("a"), "state", RecordState.BOOKED)
        h.pump()
    assert tracer.illegal[0] == "a: queued -> booked by outside any script"
    assert reachable(RecordState.PARKED, ["reserve"]) == {RecordState.PARKED}


def _decided(h: Harness, rid: str) -> Step:
    """Take ``rid``'s queued decision off the queue and run its decide stage only."""
    item = next(i for i in h.queue if i.request_id == rid)
    h.queue.remove(item)
    step = decide(h.rt, item.request_id, item.seq, item.attempt, "t")
    assert step is not None
    return step


def test_a_tour_of_the_lifecycle_takes_only_legal_transitions() -> None:
    """One scripted run through every transition the random machine may miss (conflict, wake, expiry)."""
    h = Harness(settings=isolated_settings(decide_lock=False, conflict_max_attempts=2, parked_ttl_s=30))
    tracer = Tracer(h)
    with tracer.installed():
        h.apply(uniform_cluster(workers=1, gpus=1))  # one small request fits
        for rid in ("a", "b", "c"):
            h.submit(small_request(rid))
        h.pump()  # a placed, b and c parked
        h.event({"kind": "instance_deleted", "request_id": "a"})
        h.pump()  # b woken and placed, c parked again
        h.event({"kind": "instance_deleted", "request_id": "b"})  # the GPU is free: c is woken (queued)
        h.submit(small_request("d"))
        h.submit(small_request("e"))
        first, second = _decided(h, "d"), _decided(h, "e")
        assert resume(h.rt, first) == "published" and resume(h.rt, second) is None  # e conflicts: retrying
        cancel_request(h.rt, "e")
        h.submit(small_request("f"))
        parking = _decided(h, "f")
        h.event({"kind": "worker_added", "worker": uniform_worker(2, "w2", 1, RTX_4090)})
        assert resume(h.rt, parking) == "requeued"  # the cluster changed during the decision
        cancel_request(h.rt, "f")
        h.submit(small_request("g"))
        h.submit(small_request("h"))
        h.pump()
        h.submit(small_request("i"))
        h.pump()  # c takes the new worker: g, h and i park
        h.clock.advance(31)
        assert expire_parked(h.rt) == ["g", "h", "i"]  # the audit retention pass
    assert tracer.illegal == []
    assert {
        (RecordState.DECIDED, RecordState.RETRYING), (RecordState.RETRYING, RecordState.DONE),
        (RecordState.DECIDED, RecordState.WOKEN), (RecordState.WOKEN, RecordState.DONE),
        (RecordState.PARKED, RecordState.WOKEN), (RecordState.PARKED, RecordState.DONE),
    } <= tracer.seen
