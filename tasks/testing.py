"""Test doubles for code built on the service: a fake clock and an in-memory harness.

:class:`Harness` runs the real pipeline, stores and Lua scripts on
``fakeredis`` (with Lua), with a dispatcher that queues decisions in memory
instead of sending Celery messages; :meth:`Harness.pump` runs them
synchronously, as the ``gpusched.decide`` task would (a leftover step is
finished at once, as the ``gpusched.resume`` message would). Its settings are hermetic
(:func:`isolated_settings`: the defaults, never the developer's ``GPUSCHED_*``
environment or ``configs/service.json``). Requires the ``fakeredis[lua]``
test dependency.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from scheduler_core import CandidateOut
from tasks.base.events import Event
from tasks.base.lifecycle import RecordState
from tasks.base.rows import booked_instance_key
from tasks.base.settings import Settings
from tasks.base.step import Step
from tasks.decision import decide
from tasks.decision.booking import candidate_instance
from tasks.flows.cluster_changes import apply_snapshot, handle_cluster_event
from tasks.flows.submit import Submission, submit_request
from tasks.intake.chain_config import ChainSpec, LoadedChain, build_chain
from tasks.runtime.drainer import drain_once
from tasks.state.context import Runtime, build_runtime
from tasks.state.ledger import instance_claims
from tasks.state.replication import Position
from tasks.state.streams import iter_stream


class _IsolatedSettings(Settings):
    """Settings from keyword arguments and the defaults only."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Ignore the environment and ``service.json``."""
        return (init_settings,)


def isolated_settings(**overrides: Any) -> Settings:
    """The service defaults with ``overrides`` (validated; environment and config files ignored)."""
    return _IsolatedSettings(**overrides)


#: Fake clocks start here (2026-01-01T00:00:00Z), far from 0 so ms scores look real.
EPOCH_S = 1_767_225_600.0


def published_claims(result: dict[str, Any], gpu_types: dict[int, tuple[str | None, ...]]) -> dict[str, int]:
    """Ledger claims of a published ``scheduled`` result's selected candidate."""
    chosen = CandidateOut.model_validate(result["candidates"][result["selected"]])
    return instance_claims(candidate_instance(chosen), gpu_types)


def booking_violations(rt: Runtime) -> list[str]:
    """Where published placements and the ledger disagree (empty when they agree).

    Every ``scheduled`` result on the results stream whose booking is still held
    must have published exactly the claims the ledger books for its request,
    and every gpusched booking of a finished request must have been published
    — or restored by a recovery (its result was published before Redis lost
    it; the result kept with the restored record must match the ledger too).
    """
    claims = rt.cluster.claims()
    types = rt.mirror.sync().gpu_types()
    problems: list[str] = []
    published: set[str] = set()
    for _, fields in iter_stream(rt.client, rt.keys.results):
        if fields["status"] != "scheduled":
            continue
        request_id = fields["request_id"]
        published.add(request_id)
        booked = claims.get(booked_instance_key(request_id))
        shown = published_claims(json.loads(fields["result"]), types)
        if booked is not None and shown != booked:
            problems.append(f"{request_id}: published {shown}, booked {booked}")
    for key, meta in rt.cluster.instance_meta().items():
        rid = meta.request_id
        if meta.source == "gpusched" and rid and rid not in published:
            record = rt.records.record(rid)
            if record.get("restored") == "1" and record.get("result"):
                shown = published_claims(json.loads(record["result"]), types)
                if shown != claims.get(key):
                    problems.append(f"{rid}: restored with {shown}, booked {claims.get(key)}")
            elif record.get("state") == RecordState.DONE and record.get("restored") != "1":
                problems.append(f"{rid}: booked {key} but never published")
    return problems


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

    settings: Settings = field(default_factory=isolated_settings, repr=False)
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
        self.rt.generation.check()  # as a worker node does on boot: the data generation is written

    def _dispatch(self, request_id: str, seq: int, attempt: int, countdown: float) -> None:
        self.queue.append(Dispatched(request_id, seq, attempt, countdown))

    def _resume(self, step: dict[str, Any]) -> None:
        self.resumed.append(step)
        decide.resume(self.rt, Step.from_dict(step))

    # -------------------------------------------------------------- actions
    def apply(self, document: dict[str, Any]) -> dict[str, Any]:
        """``cluster apply``."""
        return apply_snapshot(self.rt, document)

    def event(self, event: Any) -> dict[str, Any]:
        """A ``gpusched.cluster_event``."""
        return handle_cluster_event(self.rt, event)

    def submit(self, request: Any) -> Submission:
        """``ServiceClient.submit`` without waiting."""
        return submit_request(self.rt, request)

    def run_decision(self, item: Dispatched, task_id: str = "task") -> str | None:
        """What the ``decide`` task runs for one dispatched decision; returns the final outcome.

        The decision normally finishes in its own round trip; a step left over
        is finished at once, as its ``gpusched.resume`` message would.
        """
        progress = decide.decide_and_finish(self.rt, item.request_id, item.seq, item.attempt, task_id)
        if progress.step is None:
            return progress.outcome
        return decide.resume(self.rt, Step.from_dict(progress.step.to_dict()))

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

    def acknowledge(self) -> Position:
        """Store the position :meth:`Replication.acknowledge` stores once a replica confirmed its
        mark (``WAIT`` itself needs a real replica): everything written so far is acknowledged."""
        marked = self.rt.partition.call(self.rt.replication.mark_call())
        stored = marked is not None and self.rt.partition.call(self.rt.replication.advance_call(*marked, 1))
        position = self.rt.replication.position()
        if not stored or position is None:
            raise AssertionError(f"the mark {marked} was not stored as the acknowledged position")
        return position

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
        return self.rt.records.record(request_id)
