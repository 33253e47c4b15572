"""The service's Lua scripts, one atomic step each (headers document KEYS and ARGV).

Every script is loaded with the record states (``STATE.QUEUED`` ...,
generated from :class:`tasks.base.lifecycle.RecordState`) and ``lib.lua``
(the functions the scripts share: ``emit``, ``release_instance``,
``overbooked``, ``finish``, ``track_health``, ``follow_up``) prepended, so
each runs as one chunk with those as local functions. Loaded
once per client with ``register_script`` (EVALSHA, falling back to SCRIPT LOAD
after a server restart).

A :class:`Batch` sends several calls in one round trip (the decision's
record → reserve → release lease → publish steps): each script is still one
atomic step, and each re-checks its guards, so a later call of a batch
refuses on its own when an earlier one did not do its part.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Generic, TypeVar

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from tasks.base.lifecycle import lua_constants

T = TypeVar("T")

#: Folder of the ``*.lua`` files (shipped as package data).
SCRIPT_DIR = Path(__file__).resolve().parent

#: The functions every script is loaded with (not a script itself).
LIBRARY = "lib.lua"

#: Every script the service runs.
SCRIPT_NAMES = (
    "accept",
    "advance",
    "announce_released",
    "ack_due",
    "begin",
    "cancel",
    "checkpoint",
    "claim_due",
    "cluster_apply",
    "dead_letter",
    "decider_presence",
    "expire_parked",
    "group_read",
    "mark",
    "park",
    "publish",
    "record_decision",
    "release_lease",
    "redrive",
    "reject",
    "reschedule_notice",
    "release",
    "reserve",
    "restore_booking",
    "wake",
    "worker_remove",
    "worker_upsert",
)


@cache
def script_source(name: str) -> str:
    """The Lua source of ``name``.

    Raises:
        KeyError: unknown script name.
    """
    if name not in SCRIPT_NAMES:
        raise KeyError(name)
    return (SCRIPT_DIR / f"{name}.lua").read_text(encoding="utf-8")


@cache
def loaded_source(name: str) -> str:
    """What is sent to Redis for ``name``: the record states, ``lib.lua``, then the script.

    The states (``STATE.<NAME>``) come from :func:`tasks.base.lifecycle.lua_constants`.

    Raises:
        KeyError: unknown script name.
    """
    library = (SCRIPT_DIR / LIBRARY).read_text(encoding="utf-8")
    return f"{lua_constants()}{library}\n{script_source(name)}"


@dataclass(frozen=True, slots=True)
class ScriptCall(Generic[T]):
    """One prepared script call and the parser of its reply (see :meth:`Scripts.call`)."""

    name: str
    keys: list[str]
    args: list[Any]
    parse: Callable[[Any], T]


class Scripts:
    """Registered scripts bound to one Redis client."""

    __slots__ = ("_client", "_registered")

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._registered: dict[str, Script] = {}

    def script(self, name: str) -> Script:
        """The registered script ``name`` (its sha is computed locally, nothing is sent)."""
        script = self._registered.get(name)
        if script is None:
            script = self._registered[name] = self._client.register_script(loaded_source(name))
        return script

    def run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Run script ``name`` with ``keys`` and ``args`` (values are sent as strings)."""
        return self.script(name)(keys=keys, args=[str(arg) for arg in args])

    def call(self, call: ScriptCall[T]) -> T:
        """Run a prepared call on its own and parse the reply."""
        return call.parse(self.run(call.name, call.keys, call.args))

    def batch(self) -> Batch:
        """An empty batch on this client."""
        return Batch(self._client, self)


class Pending(Generic[T]):
    """The parsed reply of one batched call, available once its batch executed."""

    __slots__ = ("_done", "_parse", "_reply")

    def __init__(self, parse: Callable[[Any], T]) -> None:
        self._parse = parse
        self._reply: Any = None
        self._done = False

    def resolve(self, reply: Any) -> None:
        """Store the raw reply (called by :meth:`Batch.execute`)."""
        self._reply, self._done = reply, True

    @property
    def value(self) -> T:
        """The parsed reply.

        Raises:
            RuntimeError: the batch has not executed.
        """
        if not self._done:
            raise RuntimeError("batch not executed")
        return self._parse(self._reply)


@dataclass(frozen=True, slots=True)
class _Queued:
    script: str | None  # None: a plain command
    argv: tuple[Any, ...]
    pending: Pending[Any]


class Batch:
    """Calls sent to Redis in one round trip (a non-transactional pipeline), run in order.

    The batch is not atomic and need not be: every script guards itself. A
    script the server does not know (first use, or after a restart) is loaded
    and the batch is re-sent from that call on — so plain commands queued
    after a script must be safe to repeat (queue any other one first).
    A reply that is an error raises it from :meth:`execute`.
    """

    __slots__ = ("_client", "_queued", "_scripts")

    def __init__(self, client: redis.Redis, scripts: Scripts) -> None:
        self._client = client
        self._scripts = scripts
        self._queued: list[_Queued] = []

    def script(self, call: ScriptCall[T]) -> Pending[T]:
        """Queue a prepared script call."""
        pending = Pending(call.parse)
        argv = (len(call.keys), *call.keys, *(str(arg) for arg in call.args))
        self._queued.append(_Queued(call.name, argv, pending))
        return pending

    def command(self, parse: Callable[[Any], T], *argv: Any) -> Pending[T]:
        """Queue a plain command (its reply goes through redis-py's parser, then ``parse``)."""
        pending = Pending(parse)
        self._queued.append(_Queued(None, argv, pending))
        return pending

    def execute(self) -> None:
        """Send everything queued in one round trip and resolve every reply.

        Raises:
            redis.RedisError: a connection error, or the first error reply
                (also a script still unknown after loading it).
        """
        todo = self._queued
        replies = self._send(todo)
        missing = next((i for i, r in enumerate(replies) if isinstance(r, NoScriptError)), None)
        if missing is not None:
            _resolve(todo[:missing], replies[:missing])
            todo = todo[missing:]
            for name in {queued.script for queued in todo if queued.script}:
                self._client.script_load(loaded_source(name))
            replies = self._send(todo)
        _resolve(todo, replies)

    def _send(self, todo: list[_Queued]) -> list[Any]:
        pipe = self._client.pipeline(transaction=False)
        for queued in todo:
            if queued.script is None:
                pipe.execute_command(*queued.argv)  # type: ignore[no-untyped-call]
            else:
                sha = self._scripts.script(queued.script).sha
                pipe.execute_command("EVALSHA", sha, *queued.argv)  # type: ignore[no-untyped-call]
        return list(pipe.execute(raise_on_error=False))


def _resolve(queued: list[_Queued], replies: list[Any]) -> None:
    for call, reply in zip(queued, replies, strict=True):
        if isinstance(reply, Exception):
            raise reply
        call.pending.resolve(reply)
