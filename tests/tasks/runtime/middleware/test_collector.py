"""The garbage collector runs between messages: young cycles freed at once, old ones every refresh."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from tasks.runtime.middleware.base import Delivery
from tasks.runtime.middleware.collector import CollectBetweenMessages


class _Node:
    """An object that can be part of a reference cycle and be watched by a weak reference."""

    def __init__(self) -> None:
        self.other: Any = None


def _cycle() -> tuple[_Node, weakref.ref[_Node]]:
    first, second = _Node(), _Node()
    first.other, second.other = second, first
    return first, weakref.ref(second)


def _delivery(refresh_s: float) -> Delivery:
    settings = SimpleNamespace(collector_refresh_s=refresh_s)
    return Delivery("gpusched.decide", "m", (), {}, SimpleNamespace(settings=settings))  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _restored() -> Iterator[None]:
    yield
    gc.unfreeze()
    gc.enable()


def test_a_message_runs_with_the_collector_paused_and_its_cycles_are_freed_after_it() -> None:
    collector = CollectBetweenMessages(clock=lambda: 0.0)
    seen: list[bool] = []
    watched: list[weakref.ref[_Node]] = []

    def task() -> str:
        seen.append(gc.isenabled())
        _, watch = _cycle()  # garbage once the task returns
        watched.append(watch)
        return "done"

    assert collector.around_task(_delivery(300), task) == "done"
    assert seen == [False] and gc.isenabled()
    assert watched[0]() is None  # the young generations were collected after the message
    assert gc.get_freeze_count() > 0  # and what survived is out of the automatic passes' way


def test_a_cycle_among_frozen_objects_is_freed_at_the_next_refresh() -> None:
    now = [0.0]
    collector = CollectBetweenMessages(clock=lambda: now[0])
    kept: list[_Node] = []

    def keep_a_cycle() -> None:
        first, watch = _cycle()
        kept.append(first)
        watched.append(watch)

    watched: list[weakref.ref[_Node]] = []
    collector.around_task(_delivery(300), keep_a_cycle)  # alive: frozen after the message
    kept.clear()  # now garbage, but frozen
    now[0] = 299.0
    collector.around_task(_delivery(300), lambda: None)
    assert watched[0]() is not None  # a young collection does not reach the frozen heap
    now[0] = 300.0
    collector.around_task(_delivery(300), lambda: None)
    assert watched[0]() is None  # the refresh released the frozen heap and collected it all


def test_a_caller_that_turned_the_collector_off_keeps_it_off_and_nothing_is_frozen() -> None:
    collector = CollectBetweenMessages(clock=lambda: 0.0)
    gc.unfreeze()
    gc.disable()
    collector.around_task(_delivery(300), lambda: None)
    assert not gc.isenabled() and gc.get_freeze_count() == 0
