"""The service's Lua scripts, one atomic step each (headers document KEYS and ARGV).

Loaded once per client with ``register_script`` (EVALSHA, falling back to
SCRIPT LOAD after a server restart).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import redis
from redis.commands.core import Script

#: Folder of the ``*.lua`` files (shipped as package data).
SCRIPT_DIR = Path(__file__).resolve().parent

#: Every script the service runs.
SCRIPT_NAMES = (
    "accept",
    "ack_due",
    "begin",
    "claim_due",
    "cluster_apply",
    "dead_letter",
    "park",
    "publish",
    "record_decision",
    "release",
    "reserve",
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


class Scripts:
    """Registered scripts bound to one Redis client."""

    __slots__ = ("_client", "_registered")

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._registered: dict[str, Script] = {}

    def run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Run script ``name`` with ``keys`` and ``args`` (values are sent as strings)."""
        script = self._registered.get(name)
        if script is None:
            script = self._registered[name] = self._client.register_script(script_source(name))
        return script(keys=keys, args=[str(arg) for arg in args])
