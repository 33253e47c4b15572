"""Test doubles for code built on the service: a fake clock and an in-memory harness.

:class:`Harness` runs the real pipeline, stores and Lua scripts on
``fakeredis`` (with Lua), with a dispatcher that queues decisions in memory
instead of sending Celery messages; :meth:`Harness.pump` runs them
synchronously (decide → reserve → publish). Requires the ``fakeredis[lua]``
test dependency.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tasks import pipeline, reschedule
from tasks.chain import ChainSpec, LoadedChain, build_chain
from tasks.client import Submission, submit_request
from tasks.drainer import drain_once
from tasks.runtime import Runtime, build_runtime
from tasks.settings import Settings
from tasks.streams import Event, iter_stream

#: Fake clocks start here (2026-01-01T00:00:00Z), far from 0 so ms scores look real.
EPOCH_S = 1_767_225_600.0


@dataclass
class FakeClock:
    """A clock that only moves when told to."""

    now: float = EPOCH_S

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.now += seconds


@dataclass(frozen=True, slots=True)
class Dispatched:
    """One decision the pipeline asked to enqueue."""

    request_id: str
    seq: int
    attempt: int
    countdown: float


@dataclass
class Harness:
    """The service on fakeredis, driven synchronously."""

    settings: Settings = field(default_factory=Settings, repr=False)
    clock: FakeClock = field(default_factory=FakeClock)
    chain: LoadedChain | None = None
    queue: deque[Dispatched] = field(default_factory=deque, repr=False)
    resumed: list[dict[str, Any]] = field(default_factory=list, repr=False)
    rt: Runtime = field(init=False, repr=False)

    def __post_init__(self) -> None:
        import fakeredis

        client = fakeredis.FakeRedis(decode_responses=True, version=(7, 0))
        self.rt = build_runtime(
            self.settings, self._dispatch, self._resume, client=client, clock=self.clock,
            chain=self.chain or build_chain(ChainSpec()),
        )

    def _dispatch(self, request_id: str, seq: int, attempt: int, countdown: float) -> None:
        self.queue.append(Dispatched(request_id, seq, attempt, countdown))

    def _resume(self, step: dict[str, Any]) -> None:
        self.resumed.append(step)
        pipeline.publish(self.rt, pipeline.Step.from_dict(step))

    # -------------------------------------------------------------- actions
    def apply(self, document: dict[str, Any]) -> dict[str, Any]:
        """``cluster apply``."""
        return reschedule.apply_snapshot(self.rt, document)

    def event(self, event: Any) -> dict[str, Any]:
        """A ``gpusched.cluster_event``."""
        return reschedule.handle_cluster_event(self.rt, event)

    def submit(self, request: Any) -> Submission:
        """``tasks.client.submit`` without waiting."""
        return submit_request(self.rt, request)

    def run_decision(self, item: Dispatched, task_id: str = "task") -> str | None:
        """decide → reserve → publish for one dispatched decision; returns the final outcome."""
        step = pipeline.decide(self.rt, item.request_id, item.seq, item.attempt, task_id)
        if step is None:
            return None
        step = pipeline.reserve(self.rt, pipeline.Step.from_dict(step.to_dict()))
        if step is None:
            return None
        return pipeline.publish(self.rt, pipeline.Step.from_dict(step.to_dict()))

    def pump(self, limit: int = 100_000) -> int:
        """Run queued decisions (ignoring countdowns) until none is left; returns how many ran."""
        ran = 0
        while self.queue and ran < limit:
            self.run_decision(self.queue.popleft())
            ran += 1
        return ran

    def drain(self) -> dict[str, int]:
        """One drainer pass (outbox and timers) at the fake clock's time."""
        return drain_once(self.rt)

    # ---------------------------------------------------------------- reads
    def results(self) -> list[dict[str, str]]:
        """Every entry of the results stream."""
        return [fields for _, fields in iter_stream(self.rt.client, self.rt.keys.results)]

    def events(self, types: Iterable[str] | None = None) -> list[Event]:
        """Audit events, optionally only of ``types``."""
        wanted = set(types) if types is not None else None
        return [
            Event.from_entry(entry_id, fields)
            for entry_id, fields in iter_stream(self.rt.client, self.rt.keys.events)
            if wanted is None or fields["type"] in wanted
        ]

    def record(self, request_id: str) -> dict[str, str]:
        """A request record."""
        return self.rt.store.record(request_id)
