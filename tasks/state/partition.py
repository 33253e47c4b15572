"""One cluster partition's Redis, as every state object sees it.

A :class:`Partition` bundles what each write needs: the client, the
partition's key names, the settings, the clock (injectable for tests), the
event source stamped on audit events, and the Lua scripts. The state objects
(:mod:`tasks.state.records`, :mod:`~tasks.state.results`,
:mod:`~tasks.state.parked`, :mod:`~tasks.state.delays`,
:mod:`~tasks.state.deliveries`, :mod:`~tasks.state.cluster_store`) each take
one and prepare calls; :meth:`Partition.call` runs one prepared call,
:meth:`Partition.batch` sends several in one round trip.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis

from tasks.base.events import EventMeta, default_source
from tasks.base.keys import Keys
from tasks.base.settings import Settings
from tasks.state.scripts import Batch, ScriptCall, Scripts, T

#: Clock returning seconds since the epoch (injectable for tests).
Clock = Callable[[], float]
#: A script reply naming an outcome and, when a stream entry was added, its id.
OutcomeReply = tuple[str, str | None]


class Partition:
    """The client, keys, settings, clock, event source and scripts of one partition."""

    __slots__ = ("client", "clock", "keys", "scripts", "settings", "source")

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        settings: Settings,
        *,
        clock: Clock = time.time,
        source: str | None = None,
    ) -> None:
        self.client = client
        self.keys = keys
        self.settings = settings
        self.clock = clock
        self.source = source or default_source()
        self.scripts = Scripts(client)

    def now_ms(self) -> int:
        """Current time in milliseconds (from the injected clock)."""
        return int(self.clock() * 1000)

    def meta(self) -> EventMeta:
        """A fresh event envelope head stamped with this partition's source."""
        return EventMeta.new(self.source)

    def run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Run script ``name`` on its own and return its raw reply."""
        return self.scripts.run(name, keys, args)

    def call(self, call: ScriptCall[T]) -> T:
        """Run one prepared call on its own and parse its reply."""
        return self.scripts.call(call)

    def batch(self) -> Batch:
        """An empty batch of calls for one round trip."""
        return self.scripts.batch()

    def lease_deadline_ms(self) -> int:
        """When the drainer takes over work its caller may not finish (now + ``outbox_lease_s``)."""
        return self.now_ms() + int(self.settings.outbox_lease_s * 1000)


def outcome_reply(reply: Any) -> OutcomeReply:
    """A script's ``{outcome}`` or ``{outcome, entry id}`` reply as a pair."""
    return reply[0], reply[1] if len(reply) > 1 else None
