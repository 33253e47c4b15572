"""Per-process wiring: Redis clients, stores, the cluster mirror and the chain.

Created lazily and re-created after a fork (prefork pool children must not
share sockets with their parent). Redis clients use RESP2 (one reply shape
for every server and for fakeredis), a socket timeout suited to the call
(``None`` for blocking stream reads, which would otherwise time out at the
client and be retried), and a short retry budget; all writes go through
idempotent Lua scripts, so a retried write is harmless.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from scheduler_core import SnapshotMemo
from tasks.chain import LoadedChain, load_chain
from tasks.cluster_store import ClusterStore
from tasks.keys import Keys
from tasks.mirror import ClusterMirror
from tasks.settings import Settings, get_settings
from tasks.store import Clock, Store

#: Sends decision ``(request_id, seq, attempt)`` to the queue after ``countdown`` seconds.
Dispatch = Callable[[str, int, int, float], None]
#: Sends a ``gpusched.publish`` step (resumes a booked request whose publish message was lost).
Resume = Callable[[dict[str, Any]], None]


def redis_client(settings: Settings, *, blocking: bool = False) -> redis.Redis:
    """A client for the service's Redis.

    Args:
        settings: connection settings.
        blocking: no socket timeout, for ``XREAD ... BLOCK`` callers (redis-py 8's
            default 5 s timeout would abort and retry a longer block).
    """
    return redis.Redis.from_url(
        settings.redis_url,
        decode_responses=True,
        protocol=2,
        socket_timeout=None if blocking else settings.redis_socket_timeout_s,
        socket_connect_timeout=settings.redis_socket_connect_timeout_s,
        health_check_interval=settings.redis_health_check_interval_s,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), 3),
    )


@dataclass(slots=True)
class Runtime:
    """Everything a task needs, for one process and one cluster partition."""

    settings: Settings
    keys: Keys
    client: redis.Redis
    store: Store
    cluster: ClusterStore
    mirror: ClusterMirror
    chain: LoadedChain
    dispatch: Dispatch
    resume: Resume
    #: Per-worker allocatable state the core reuses across this process's decisions.
    memo: SnapshotMemo = field(default_factory=SnapshotMemo)


def build_runtime(
    settings: Settings,
    dispatch: Dispatch,
    resume: Resume,
    *,
    client: redis.Redis | None = None,
    clock: Clock | None = None,
    chain: LoadedChain | None = None,
) -> Runtime:
    """Wire a runtime (tests pass a fakeredis client, a fake clock and a collecting dispatch)."""
    keys = Keys(settings.cluster)
    client = client if client is not None else redis_client(settings)
    store = Store(client, keys, settings, clock=clock) if clock else Store(client, keys, settings)
    cluster = ClusterStore(store)
    return Runtime(
        settings=settings,
        keys=keys,
        client=client,
        store=store,
        cluster=cluster,
        mirror=ClusterMirror(cluster),
        chain=chain if chain is not None else load_chain(settings.chain_path),
        dispatch=dispatch,
        resume=resume,
    )


_RUNTIME: tuple[int, Runtime] | None = None


def get_runtime(dispatch: Dispatch, resume: Resume) -> Runtime:
    """The runtime of this process, built on first use and after a fork."""
    global _RUNTIME
    pid = os.getpid()
    if _RUNTIME is None or _RUNTIME[0] != pid:
        _RUNTIME = (pid, build_runtime(get_settings(), dispatch, resume))
    return _RUNTIME[1]


def reset_runtime() -> None:
    """Drop the cached runtime (after settings changed)."""
    global _RUNTIME
    _RUNTIME = None
