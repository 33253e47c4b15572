"""Scheduling events and message assembly (GPUStack ``policies/event_recorder``).

GPUStack renders user-facing text from events: each strategy records what it
saw under an *action* key, and the final message is the default estimate text
plus the message of the most advanced strategy that was attempted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from scheduler_core.reasons import Reason


class Action(StrEnum):
    """Event action keys, GPUStack's ``EVENT_ACTION_*`` values."""

    DEFAULT = "default_scheduling_msg"
    MANUAL_MULTI = "manual_multi_gpu_scheduling_msg"
    AUTO_MULTI_WORKER_MULTI_GPU = "auto_multi_worker_multi_gpu_scheduling_msg"
    AUTO_SINGLE_WORKER_MULTI_GPU = "auto_single_worker_multi_gpu_scheduling_msg"
    AUTO_SINGLE_GPU = "auto_single_gpu_scheduling_msg"


class Level(StrEnum):
    """Event levels (GPUStack ``EventLevelEnum``)."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


#: Strategy actions in the order ``_set_messages`` consults them (most advanced first).
MESSAGE_PRIORITY = (
    Action.MANUAL_MULTI,
    Action.AUTO_MULTI_WORKER_MULTI_GPU,
    Action.AUTO_SINGLE_WORKER_MULTI_GPU,
    Action.AUTO_SINGLE_GPU,
)


@dataclass(frozen=True, slots=True)
class Event:
    """One recorded event.

    ``reason`` is a stable machine code (ours, not GPUStack's): a :class:`Reason`
    when the event says why something did not fit, else an informational code
    (the diffusion planner's ``diffusion_tuning``) or None.
    """

    level: Level
    action: str
    message: str
    reason: Reason | str | None = None


def list_message(lines: str | Iterable[str]) -> str:
    """GPUStack's ``ListMessageBuilder``: each line prefixed with ``- ``, joined by newlines."""
    items = [lines] if isinstance(lines, str) else list(lines)
    return "\n".join(f"- {line}" for line in items)


class EventCollector:
    """Collects events, dropping exact repeats of ``(level, action, message)`` as GPUStack does."""

    __slots__ = ("_events", "_seen")

    def __init__(self) -> None:
        self._events: list[Event] = []
        self._seen: set[tuple[str, str, str]] = set()

    @property
    def events(self) -> tuple[Event, ...]:
        """Events in the order they were first recorded."""
        return tuple(self._events)

    def add(self, level: Level, action: str, message: str, reason: Reason | str | None = None) -> None:
        """Record an event unless the same level/action/message was recorded before."""
        key = (level.value, action, message)
        if key in self._seen:
            return
        self._seen.add(key)
        self._events.append(Event(level, action, message, reason))

    def latest_by_action(self) -> dict[str, str]:
        """Message of the last recorded event for each action."""
        latest: dict[str, str] = {}
        for event in self._events:
            latest[event.action] = event.message
        return latest

    def assemble_message(self) -> str:
        """GPUStack's ``_set_messages`` text: default message, a newline, then the
        message of the first non-empty action in :data:`MESSAGE_PRIORITY`."""
        latest = self.latest_by_action()
        text = latest.get(Action.DEFAULT, "") + "\n"
        for action in MESSAGE_PRIORITY:
            if latest.get(action):
                return text + latest[action]
        return text
