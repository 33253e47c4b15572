"""gpusched service: Redis + Celery around the placement core, and the ``gpusched`` CLI.

Public API (for control planes and operators)::

    from tasks import ServiceClient, Settings, submit
    result = submit(request, wait=True, timeout=30)          # Contract 1 result dict

    from tasks import Keys, ensure_group, read_group, ack      # consume gpusched:results
    from tasks import replay, format_report                    # audit recorded decisions
    from tasks import RedisOutOfMemory, DataLost                # what submit() raises on Redis faults
    from tasks import NotReplicated                            # ... and when no replica confirmed in time

The names are loaded on first use, so ``gpusched schedule`` (no Redis, no
Celery) imports neither. Everything else is internal; the code is organised
in rooms that are floors, lowest first: :mod:`tasks.base`, :mod:`tasks.intake`,
:mod:`tasks.state`, :mod:`tasks.audit`, :mod:`tasks.flows`,
:mod:`tasks.decision`, :mod:`tasks.runtime`, :mod:`tasks.edges`; a module
imports from its own room or a lower one (see ``docs/architecture.md``).
:mod:`tasks.testing` is the test harness for code built on the service.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:  # the real definitions, for type checkers (nothing is imported at run time)
    from tasks.base.events import Event
    from tasks.base.keys import Keys
    from tasks.base.settings import Settings, get_settings
    from tasks.decision.replay import ReplayReport, format_report, replay
    from tasks.edges.client import ServiceClient, WaitTimeout, default_client, submit
    from tasks.flows.submit import Submission
    from tasks.state.context import redis_client
    from tasks.state.generation import DataLost
    from tasks.state.outages import RedisOutOfMemory
    from tasks.state.replication import NotReplicated
    from tasks.state.streams import ack, claim_stale, ensure_group, read_group, read_new

#: Public name → the module that defines it.
_EXPORTS = {
    "DataLost": "tasks.state.generation",
    "Event": "tasks.base.events",
    "Keys": "tasks.base.keys",
    "NotReplicated": "tasks.state.replication",
    "RedisOutOfMemory": "tasks.state.outages",
    "ReplayReport": "tasks.decision.replay",
    "ServiceClient": "tasks.edges.client",
    "Settings": "tasks.base.settings",
    "Submission": "tasks.flows.submit",
    "WaitTimeout": "tasks.edges.client",
    "ack": "tasks.state.streams",
    "claim_stale": "tasks.state.streams",
    "default_client": "tasks.edges.client",
    "ensure_group": "tasks.state.streams",
    "format_report": "tasks.decision.replay",
    "get_settings": "tasks.base.settings",
    "read_group": "tasks.state.streams",
    "read_new": "tasks.state.streams",
    "redis_client": "tasks.state.context",
    "replay": "tasks.decision.replay",
    "submit": "tasks.edges.client",
}

__all__ = [
    "DataLost",
    "Event",
    "Keys",
    "NotReplicated",
    "RedisOutOfMemory",
    "ReplayReport",
    "ServiceClient",
    "Settings",
    "Submission",
    "WaitTimeout",
    "ack",
    "claim_stale",
    "default_client",
    "ensure_group",
    "format_report",
    "get_settings",
    "read_group",
    "read_new",
    "redis_client",
    "replay",
    "submit",
]


def __getattr__(name: str) -> object:
    """Load a public name from its module on first use (PEP 562).

    Raises:
        AttributeError: ``name`` is not public.
    """
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tasks' has no attribute {name!r}")
    value: object = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names and the module's own attributes."""
    return sorted({*globals(), *__all__})
