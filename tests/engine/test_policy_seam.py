"""The generic seam knows no policy: policies own their facts and wake answers (issue 21, item 2).

* no generic core module imports ``scheduler_core.precise`` (checked on the source, with ast);
* a third policy is its own strategies plus one registration: a test-only policy, registered
  here, is requested by name, prepares its own facts once for two strategies, decides, and
  answers for its own wake floor, with no change anywhere else;
* the wake floor of a chain is the union of its strategies' own answers.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
from builders import GIB, RTX_4090, instance, model, request, uniform_worker

import scheduler_core
from scheduler_core import ScheduleRequest, Worker, schedule, wake_floor
from scheduler_core.candidates import Candidate, Claim
from scheduler_core.cycle import CycleState, DecisionInputs, PolicySettings
from scheduler_core.events import Action, Level
from scheduler_core.framework import Clears, Policy
from scheduler_core.messages import default_message
from scheduler_core.outcomes import FailureTally, StageOutcome
from scheduler_core.plugins import (
    DEFAULT_CHAIN,
    POLICIES,
    SCORERS_BY_NAME,
    STRATEGIES_BY_NAME,
    register_policy,
    unregister_policy,
)
from scheduler_core.reasons import MORE_CAPACITY, Reason
from scheduler_core.scoring import GpustackScorer
from scheduler_core.selection import Selection
from scheduler_core.wake import ANY_GPU, GpuFloor, WakeQuery, union_of

CORE = Path(scheduler_core.__file__).resolve().parent
#: The modules that run any policy: they must name none.
GENERIC = ("framework", "selection", "decision", "messages", "cycle", "wake", "_render", "caching", "memo",
           "outcomes", "validation", "hooks")


def _imports(path: Path) -> set[str]:
    """Every module a file names in ``import x`` or ``from x import y`` (and ``x.y``)."""
    nodes = list(ast.walk(ast.parse(path.read_text(encoding="utf-8"))))
    plain = {alias.name for node in nodes if isinstance(node, ast.Import) for alias in node.names}
    froms = [node for node in nodes if isinstance(node, ast.ImportFrom) and node.module]
    dotted = {f"{node.module}.{alias.name}" for node in froms for alias in node.names}
    return plain | dotted | {str(node.module) for node in froms}


@pytest.mark.parametrize("name", GENERIC)
def test_no_generic_module_imports_a_policy(name: str) -> None:
    imported = _imports(CORE / f"{name}.py")
    policies = {m for m in imported if m.startswith(("scheduler_core.precise", "scheduler_core.strategies"))}
    assert not policies, f"scheduler_core/{name}.py imports {sorted(policies)}"


# --------------------------------------------------------------------------- a third policy


@dataclass(frozen=True)
class ToySettings:
    """The toy policy's one knob: the bytes it books per GPU."""

    booked: int = 2 * GIB


@dataclass(frozen=True)
class ToyFacts:
    """What the toy strategies read: the bytes to book (prepared once per decision)."""

    booked: int


#: How many times the toy facts were built (once per decision, whatever the strategies ask).
BUILT: list[int] = []


def _toy_facts(inputs: DecisionInputs) -> ToyFacts:
    BUILT.append(1)
    return ToyFacts(inputs.settings.get(ToySettings).booked)


class _ToyStage:
    """Books ``booked`` bytes on the first GPU with that much allocatable memory."""

    policy: ClassVar[str] = "toy"
    clears: ClassVar[Clears] = {Reason.INSUFFICIENT_VRAM: MORE_CAPACITY}

    def __init__(self, name: str, gpus: int) -> None:
        self.name = name
        self.gpus = gpus

    def prepare(self, inputs: DecisionInputs, state: CycleState) -> None:
        state.prepare(ToyFacts, lambda: _toy_facts(inputs))

    def wake_floor(self, query: WakeQuery) -> GpuFloor | None:
        return GpuFloor(least_bytes=query.settings.get(ToySettings).booked * (3 - self.gpus))

    def skip(self, selection: Selection) -> bool:
        return False

    def __call__(self, selection: Selection) -> StageOutcome:
        booked = selection.state.read(ToyFacts).booked
        tally = FailureTally(self.name)
        for worker in selection.ordered:
            allocatable = selection.cluster.allocatable(worker, worker.gpus[0].type)
            free = [g.index for g in worker.gpus
                    if g.index is not None and allocatable.vram[g.index] >= booked]
            if len(free) >= self.gpus:
                vram = dict.fromkeys(free[: self.gpus], booked)
                claim = Claim(vram, 0, None, booked)
                return tally.outcome([Candidate(worker, worker.gpus[0].type, tuple(vram), claim)])
            tally.add(Reason.INSUFFICIENT_VRAM, worker)
        selection.log.events.add(Level.INFO, Action.AUTO_SINGLE_GPU, "- No GPU has the toy's bytes.",
                                 Reason.INSUFFICIENT_VRAM)
        return tally.outcome(())


def _headline(selection: Selection) -> str:
    return f"The toy books {selection.state.read(ToyFacts).booked} bytes."


TOY = Policy("toy", (_ToyStage("toy_two_gpus", 2), _ToyStage("toy_one_gpu", 1)), GpustackScorer(), _headline)


@pytest.fixture
def toy() -> Iterator[None]:
    before = (dict(STRATEGIES_BY_NAME), dict(SCORERS_BY_NAME), list(POLICIES))
    register_policy(TOY)
    BUILT.clear()
    try:
        yield
    finally:
        unregister_policy("toy")
        # the registry is as it was: the built-in policies keep their plugins
        assert (dict(STRATEGIES_BY_NAME), dict(SCORERS_BY_NAME), list(POLICIES)) == before


def test_an_unregistered_policy_is_rejected_naming_the_field() -> None:
    result = schedule(request(model(), [uniform_worker(1, "a", 1, RTX_4090)], policy="toy"))
    assert result.status == "rejected" and result.error is not None
    assert result.error.field == "policy"
    assert result.error.message == "unknown policy 'toy'; expected one of ['gpustack', 'precise']"


def test_a_registered_policy_decides_with_its_own_facts_built_once(toy: None) -> None:
    """One worker of two 4090s, GPU 1 nearly full: the two-GPU stage finds nothing (its
    failure recorded), the one-GPU stage books the toy's 2 GiB on GPU 0."""
    workers = [uniform_worker(1, "a", 2, RTX_4090)]
    busy = [instance(1, 1, {1: RTX_4090 - GIB})]
    result = schedule(request(model(), workers, busy, policy="toy"))
    assert result.status == "scheduled" and result.policy == "toy"
    chosen = result.candidates[result.selected or 0]
    assert chosen.gpu_indexes == [0] and chosen.computed_resource_claim.vram == {"0": 2 * GIB}
    assert BUILT == [1]  # two strategies asked for ToyFacts; built once
    assert result.events[0].message == f"The toy books {2 * GIB} bytes."
    assert result.events[1].reason == "insufficient_vram"
    # the estimate keeps its fractions per GPU type: the policy did not ask otherwise
    assert result.estimate is not None and result.estimate.mem_fraction_static


def test_a_registered_policy_reads_its_own_settings_from_the_chain(toy: None) -> None:
    """A chain that carries ToySettings(6 GiB): the toy books 6 GiB."""
    chain = DEFAULT_CHAIN.__class__(
        DEFAULT_CHAIN.filters, TOY.strategies, settings=PolicySettings.of(ToySettings(6 * GIB))
    )
    result = schedule(request(model(), [uniform_worker(1, "a", 1, RTX_4090)], policy="toy"), chain=chain)
    assert result.candidates[0].computed_resource_claim.vram == {"0": 6 * GIB}


def test_a_registered_policy_answers_for_its_own_wake_floor(toy: None) -> None:
    """Every GPU full: parked; the floor is the union of the stages' answers (the lower bytes)."""
    workers = [uniform_worker(1, "a", 2, RTX_4090)]
    busy = [instance(1, 1, {0: RTX_4090, 1: RTX_4090})]
    raw = request(model(), workers, busy, policy="toy")
    result = schedule(raw)
    assert result.status == "unschedulable"
    rows = [Worker.model_validate(w) for w in workers]
    floor = wake_floor(ScheduleRequest.model_validate(raw).model, result, DEFAULT_CHAIN, rows)
    assert floor == GpuFloor(least_bytes=2 * GIB)  # min(2 GiB × 1, 2 GiB × 2)
    assert not floor.could_clear(None, [GIB]) and floor.could_clear(None, [GIB, 2 * GIB])


def test_a_requested_policy_default_message_is_gpustacks_for_gpustack() -> None:
    raw = request(model(), [uniform_worker(1, "a", 1, RTX_4090)], [instance(1, 1, {0: RTX_4090})])
    result = schedule(raw)
    assert result.events[0].message.startswith("- The model requires approximately")
    assert default_message.__module__ == "scheduler_core.messages"


# --------------------------------------------------------------------------- the union


def test_the_union_admits_every_gpu_either_floor_admits() -> None:
    a = GpuFloor(shares={"cuda": 0.8, "rocm": 0.5}, least_bytes=4 * GIB)
    b = GpuFloor(shares={"cuda": 0.6}, least_bytes=6 * GIB)
    union = a.union(b)
    assert union == GpuFloor(shares={"cuda": 0.6}, least_bytes=4 * GIB)  # rocm: b has no floor
    for shares, frees in [([("cuda", 0.7)], None), ([("rocm", 0.1)], None), (None, [5 * GIB])]:
        either = a.could_clear(shares, frees) or b.could_clear(shares, frees)
        assert either <= union.could_clear(shares, frees)
    assert union_of([None, None]) == ANY_GPU and union_of([a, None]) == a
    assert a.union(ANY_GPU) == ANY_GPU  # a strategy that could use any GPU


def test_the_precise_floor_is_the_union_of_its_two_stages() -> None:
    """One worker of 4 GPUs and one of 2: the single-worker stage answers for 4 ranks, the
    multi-worker stage for 2 nodes × 4 GPUs = 8; the chain's floor is the looser (8 ranks)."""
    from scheduler_core.plugins import PRECISE_CHAIN, PRECISE_STRATEGIES
    from scheduler_core.precise.settings import PreciseSettings

    weights = 15_231_233_024
    workers = [uniform_worker(1, "a", 4, 4 * GIB), uniform_worker(2, "b", 2, 4 * GIB)]
    raw = request(model(weight_bytes=weights), workers, policy="precise")
    result = schedule(raw)
    assert result.status == "unschedulable" and result.estimate is not None
    rows = [Worker.model_validate(w) for w in workers]
    query = WakeQuery(ScheduleRequest.model_validate(raw).model, result.estimate, PolicySettings(), rows)
    context = PreciseSettings().sglang_context
    answers = [stage.wake_floor(query) for stage in PRECISE_STRATEGIES]
    assert answers == [None, GpuFloor(least_bytes=context + -(-weights // 16)),
                       GpuFloor(least_bytes=context + -(-weights // 32))]
    assert PRECISE_CHAIN.wake_floor(query) == answers[2]
