"""The runtime context every stage takes: settings, Redis clients, state objects, mirror, chain.

Built lazily per thread and re-built after a fork (prefork pool children
must not share sockets with their parent; with the solo or threads pool the
drainer thread and task threads must not share the mirror and the core's
memo, which are not thread-safe). Redis clients use RESP2 (one reply shape
for every server and for fakeredis), a finite socket timeout (for blocking
stream reads, one above the longest block, so a half-open connection fails
instead of hanging), and a short retry budget. Every write is a Lua script
that is safe to re-send when its reply was lost: its guards refuse a second
application (the caller then finds the first one's effect), and the follow-up
work a cluster change needs is recorded by the script itself under the event
id the caller chose (``gpusched:followups``), so the caller or the drainer
still does it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry

from scheduler_core import SnapshotMemo
from tasks.base.keys import Keys
from tasks.base.settings import Settings, get_settings
from tasks.intake.chain_config import LoadedChain, load_chain
from tasks.state.cluster_store import ClusterStore
from tasks.state.delays import DelaySets
from tasks.state.deliveries import Deliveries
from tasks.state.generation import DataGeneration, GenerationMemory, GenerationStatus, process_memory
from tasks.state.mirror import ClusterMirror
from tasks.state.parked import ParkedRequests
from tasks.state.partition import Clock, Partition
from tasks.state.records import RequestRecords
from tasks.state.replication import Replication
from tasks.state.results import PublishedResults
from tasks.state.sentinel import master_client

#: Sends decision ``(request_id, seq, attempt)`` as ``gpusched.decide`` after ``countdown`` seconds.
Dispatch = Callable[[str, int, int, float], None]
#: Sends decisions ``[(request_id, seq, attempt), ...]`` as one ``gpusched.decide_batch`` message.
DispatchBatch = Callable[[list[tuple[str, int, int]]], None]
#: Sends a leftover step as ``gpusched.resume`` (e.g. a booked request whose publish was lost).
Resume = Callable[[dict[str, Any]], None]


#: Socket timeout above the longest block of a blocking client (reply latency margin).
BLOCK_MARGIN_S = 2.0


def redis_client(settings: Settings, *, blocking: bool = False, max_block_ms: int = 5000) -> redis.Redis:
    """A client for the service's Redis.

    Through Sentinel (``redis_sentinels``) the client follows the current
    master (:func:`tasks.state.sentinel.master_client`); else it connects to
    ``redis_url``.

    Args:
        settings: connection settings.
        blocking: for ``XREAD``/``XREADGROUP ... BLOCK`` callers blocking at most
            ``max_block_ms``: the socket timeout is the block plus
            :data:`BLOCK_MARGIN_S` (redis-py 8's default 5 s would abort and
            retry a longer block; no timeout would hang forever on a half-open
            connection), and a timeout is not retried here — the caller's read
            loop re-issues the read and keeps its own deadline.
        max_block_ms: the longest block this client's caller uses.
    """
    timeout = max_block_ms / 1000 + BLOCK_MARGIN_S if blocking else settings.redis_socket_timeout_s
    retry = Retry(NoBackoff(), 0) if blocking else Retry(ExponentialBackoff(cap=1.0, base=0.05), 3)
    connection: dict[str, Any] = {
        "decode_responses": True,
        "protocol": 2,
        "socket_timeout": timeout,
        "socket_connect_timeout": settings.redis_socket_connect_timeout_s,
        "health_check_interval": settings.redis_health_check_interval_s,
        "retry": retry,
    }
    if settings.redis_sentinels:
        return master_client(settings, **connection)
    return redis.Redis.from_url(settings.redis_url, **redis_credentials(settings), **connection)


def redis_credentials(settings: Settings) -> dict[str, str]:
    """``username``/``password`` from the settings, for a URL that carries none (the URL's win)."""
    credentials: dict[str, str] = {}
    if settings.redis_username:
        credentials["username"] = settings.redis_username
    if settings.redis_password is not None:
        credentials["password"] = settings.redis_password.get_secret_value()
    return credentials


@contextmanager
def impatient_client(client: redis.Redis, timeout_s: float) -> Iterator[redis.Redis]:
    """A client for the same server as ``client`` that gives up after ``timeout_s`` (no retry).

    For a last write before a deadline (the hard time limit); its connection is
    closed on exit.
    """
    pool = client.connection_pool
    kwargs = {
        **pool.connection_kwargs,
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "retry": Retry(NoBackoff(), 0),
    }
    own = redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    try:
        yield redis.Redis(connection_pool=own)
    finally:
        own.disconnect()


@dataclass(slots=True)
class Runtime:
    """Everything a stage needs, for one thread and one cluster partition.

    One state object per concern (:mod:`tasks.state`), all on the same
    :class:`~tasks.state.partition.Partition`, which owns the settings, the
    key names and the client; the runtime reads them through it.
    """

    partition: Partition
    records: RequestRecords
    results: PublishedResults
    parked: ParkedRequests
    delays: DelaySets
    deliveries: Deliveries
    cluster: ClusterStore
    mirror: ClusterMirror
    chain: LoadedChain
    dispatch: Dispatch
    resume: Resume
    #: What this runtime remembers of the data generation, and the check against it.
    generation: DataGeneration
    #: Acknowledging writes once a replica holds them (:mod:`tasks.state.replication`).
    replication: Replication
    #: Per-worker allocatable state the core reuses across this thread's decisions.
    memo: SnapshotMemo = field(default_factory=SnapshotMemo)
    #: Sends many decisions as one batch message (None: each is sent alone).
    dispatch_batch: DispatchBatch | None = None

    @property
    def settings(self) -> Settings:
        """The partition's settings."""
        return self.partition.settings

    @property
    def keys(self) -> Keys:
        """The partition's key names."""
        return self.partition.keys

    @property
    def client(self) -> redis.Redis:
        """The partition's Redis client."""
        return self.partition.client


def check_data_generation(rt: Runtime) -> GenerationStatus:
    """The runtime's data generation check; after a recovery, its cluster mirror is read again.

    Raises:
        redis.RedisError: the check could not read Redis.
    """
    status = rt.generation.check()
    if status.verdict == "recovered":
        rt.mirror.reload()
    return status


def build_runtime(
    settings: Settings,
    dispatch: Dispatch,
    resume: Resume,
    *,
    client: redis.Redis | None = None,
    clock: Clock | None = None,
    chain: LoadedChain | None = None,
    memory: GenerationMemory | None = None,
    dispatch_batch: DispatchBatch | None = None,
) -> Runtime:
    """Wire a runtime (tests pass a fakeredis client, a fake clock and a collecting dispatch).

    Args:
        memory: the data generation memory to share (a worker process's, see
            :func:`tasks.state.generation.process_memory`); None: this runtime's own.
    """
    keys = Keys(settings.cluster)
    client = client if client is not None else redis_client(settings)
    partition = Partition(client, keys, settings, clock=clock) if clock else Partition(client, keys, settings)
    cluster = ClusterStore(partition)
    replication = Replication(partition)
    return Runtime(
        partition=partition,
        records=RequestRecords(partition),
        results=PublishedResults(partition),
        parked=ParkedRequests(partition),
        delays=DelaySets(partition),
        deliveries=Deliveries(partition),
        cluster=cluster,
        mirror=ClusterMirror(cluster),
        chain=chain if chain is not None else load_chain(settings.chain_path),
        dispatch=dispatch,
        resume=resume,
        generation=DataGeneration(partition, memory, replication),
        replication=replication,
        dispatch_batch=dispatch_batch,
    )


class _Cached(threading.local):
    """This thread's runtime, and the (pid, generation) it was built for."""

    key: tuple[int, int] | None = None
    runtime: Runtime | None = None


_CACHED = _Cached()
#: Bumped by :func:`reset_runtime`; every thread rebuilds on its next call.
_GENERATION = [0]


def get_runtime(dispatch: Dispatch, resume: Resume, dispatch_batch: DispatchBatch | None = None) -> Runtime:
    """The runtime of this thread, built on first use, after a fork and after a reset.

    Every runtime of the process shares the process's memory of the data
    generation (a forked pool process starts with its parent's).
    """
    key = (os.getpid(), _GENERATION[0])
    if _CACHED.runtime is None or _CACHED.key != key:
        settings = get_settings()
        path = Path(settings.generation_file) if settings.generation_file else None
        memory = process_memory(settings.redis_url, Keys(settings.cluster).prefix, path)
        _CACHED.runtime = build_runtime(settings, dispatch, resume, memory=memory,
                                        dispatch_batch=dispatch_batch)
        _CACHED.key = key
    return _CACHED.runtime


def reset_runtime() -> None:
    """Drop the cached runtimes of every thread (after settings changed)."""
    _GENERATION[0] += 1
