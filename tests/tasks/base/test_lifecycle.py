"""The record lifecycle table against the Lua scripts: every state written and every guard named."""

from __future__ import annotations

import re

import fakeredis
import pytest

from tasks.base.lifecycle import ALL_STATES, TRANSITIONS, RecordState, is_legal, lua_constants
from tasks.state.scripts import LIBRARY, SCRIPT_DIR, SCRIPT_NAMES, script_source

#: ``'state', STATE.X`` in an HSET: a write of state X.
WRITE = re.compile(r"'state',\s*STATE\.(\w+)")
#: Any ``STATE.X``.
NAMED = re.compile(r"\bSTATE\.(\w+)")
#: A quoted state name in code (what the scripts must not spell themselves).
LITERAL = re.compile(r"'(" + "|".join(s.value for s in RecordState) + r")'")


def _code(source: str) -> str:
    """The source without its comments."""
    return "\n".join(line.split("--", 1)[0] for line in source.splitlines())


def written(source: str) -> set[RecordState]:
    """The states a script writes (``finish`` of ``lib.lua`` writes ``done``)."""
    code = _code(source)
    states = {RecordState[name] for name in WRITE.findall(code)}
    return states | ({RecordState.DONE} if re.search(r"\bfinish\(", code) else set())


def guard_problems(step: str, source: str) -> list[str]:
    """What is wrong between a script's guards and the table's sources for ``step``.

    A guard names either every state the step accepts or every state it refuses
    (``cancel`` refuses ``done``, ``begin`` accepts four states).
    """
    code = _code(source)
    named = {RecordState[name] for name in NAMED.findall(WRITE.sub("", code))}
    accepted = {s for t in TRANSITIONS if t.step == step for s in t.sources if s is not None}
    if accepted <= named or (ALL_STATES - accepted) <= named:
        return []
    return [f"{step}: guards name {sorted(named)}, the table accepts {sorted(accepted)}"]


def test_no_script_spells_a_state_itself() -> None:
    for name in (*SCRIPT_NAMES, LIBRARY.removesuffix(".lua")):
        code = _code((SCRIPT_DIR / f"{name}.lua").read_text(encoding="utf-8"))
        assert LITERAL.findall(code) == [], name
        assert set(NAMED.findall(code)) <= {s.name for s in RecordState}, name


def test_every_state_a_script_writes_is_a_target_of_its_transitions() -> None:
    for name in SCRIPT_NAMES:
        targets = {t.target for t in TRANSITIONS if t.step == name}
        assert written(script_source(name)) == targets, name


def test_only_finish_writes_a_state_in_the_library() -> None:
    library = (SCRIPT_DIR / LIBRARY).read_text(encoding="utf-8")
    assert {RecordState[n] for n in WRITE.findall(_code(library))} == {RecordState.DONE}
    finish = library[library.index("local function finish("):]
    assert WRITE.search(finish[: finish.index("\nend\n")])


def test_every_step_of_the_table_is_a_script() -> None:
    assert {t.step for t in TRANSITIONS} <= set(SCRIPT_NAMES)


def test_every_guard_agrees_with_the_table() -> None:
    problems = [p for name in SCRIPT_NAMES for p in guard_problems(name, script_source(name))]
    assert problems == []


def test_a_guard_that_drops_an_accepted_state_is_reported() -> None:
    """The check itself: ``begin`` without ``woken`` (a woken request would never be decided) fails."""
    begin = script_source("begin").replace(" or state == STATE.WOKEN", "")
    assert guard_problems("begin", begin) != []
    assert written(script_source("reserve").replace("STATE.RETRYING", "STATE.PARKED")) != {
        RecordState.BOOKED, RecordState.RETRYING,
    }


@pytest.mark.parametrize("state", list(RecordState))
def test_the_generated_constants_are_the_enum(state: RecordState) -> None:
    client = fakeredis.FakeRedis(decode_responses=True, version=(7, 0))
    assert client.eval(f"{lua_constants()}return STATE.{state.name}", 0) == state.value


def test_the_table_reads_as_the_lifecycle() -> None:
    """Spot checks from the scripts' own headers."""
    assert is_legal("begin", RecordState.WOKEN, RecordState.DECIDING)
    assert is_legal("wake", RecordState.PARKED, RecordState.WOKEN)
    assert not is_legal("wake", RecordState.DECIDED, RecordState.WOKEN)
    assert not is_legal("reserve", RecordState.PARKED, RecordState.BOOKED)
    assert not is_legal("cancel", RecordState.DONE, RecordState.DONE)
    assert is_legal("accept", None, RecordState.QUEUED)
    assert not is_legal("accept", RecordState.DONE, RecordState.QUEUED)
