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
in rooms: :mod:`tasks.intake`, :mod:`tasks.decision`, :mod:`tasks.state`,
:mod:`tasks.audit`, :mod:`tasks.runtime`, :mod:`tasks.edges` (see
``docs/architecture.md``). :mod:`tasks.testing` is the test harness for code
built on the service.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:  # the real definitions, for type checkers (nothing is imported at run time)
    from tasks.audit.events import Event
    from tasks.audit.replay import ReplayReport, format_report, replay
    from tasks.audit.streams import ack, claim_stale, ensure_group, read_group, read_new
    from tasks.edges.client import ServiceClient, WaitTimeout, default_client, submit
    from tasks.intake.submit import Submission
    from tasks.runtime.context import redis_client
    from tasks.runtime.outages import RedisOutOfMemory
    from tasks.runtime.settings import Settings, get_settings
    from tasks.state.generation import DataLost
    from tasks.state.keys import Keys
    from tasks.state.replication import NotReplicated

#: Public name → the module that defines it.
_EXPORTS = {
    "DataLost": "tasks.state.generation",
    "Event": "tasks.audit.events",
    "Keys": "tasks.state.keys",
    "NotReplicated": "tasks.state.replication",
    "RedisOutOfMemory": "tasks.runtime.outages",
    "ReplayReport": "tasks.audit.replay",
    "ServiceClient": "tasks.edges.client",
    "Settings": "tasks.runtime.settings",
    "Submission": "tasks.intake.submit",
    "WaitTimeout": "tasks.edges.client",
    "ack": "tasks.audit.streams",
    "claim_stale": "tasks.audit.streams",
    "default_client": "tasks.edges.client",
    "ensure_group": "tasks.audit.streams",
    "format_report": "tasks.audit.replay",
    "get_settings": "tasks.runtime.settings",
    "read_group": "tasks.audit.streams",
    "read_new": "tasks.audit.streams",
    "redis_client": "tasks.runtime.context",
    "replay": "tasks.audit.replay",
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
