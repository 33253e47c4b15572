"""The service's Lua scripts, one atomic step each (headers document KEYS and ARGV).

Every script is loaded with ``lib.lua`` (the functions the scripts share:
``emit``, ``release_instance``, ``finish``, ``track_health``, ``follow_up``)
prepended, so each runs as one chunk with those as local functions. Loaded
once per client with ``register_script`` (EVALSHA, falling back to SCRIPT LOAD
after a server restart).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import redis
from redis.commands.core import Script

#: Folder of the ``*.lua`` files (shipped as package data).
SCRIPT_DIR = Path(__file__).resolve().parent

#: The functions every script is loaded with (not a script itself).
LIBRARY = "lib.lua"

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
    "redrive",
    "reject",
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


@cache
def loaded_source(name: str) -> str:
    """What is sent to Redis for ``name``: ``lib.lua``, then the script.

    Raises:
        KeyError: unknown script name.
    """
    library = (SCRIPT_DIR / LIBRARY).read_text(encoding="utf-8")
    return f"{library}\n{script_source(name)}"


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
            script = self._registered[name] = self._client.register_script(loaded_source(name))
        return script(keys=keys, args=[str(arg) for arg in args])
