"""What counts as a Redis or broker outage (transient), as opposed to a task's own error.

Three kinds, told apart by :func:`outage_of`:

* ``unreachable`` — a connection error or a socket timeout (Redis down,
  restarting, loading its data, the network, the broker), a demoted master
  answering ``READONLY``, a master refusing writes with ``NOREPLICAS``
  (``min-replicas-to-write``), or no replica acknowledging in time
  (:class:`tasks.state.replication.NotReplicated`, a connection error);
* ``out_of_memory`` — Redis at ``maxmemory`` refuses writes (``OOM``; inside a
  ``MULTI`` that crossed the limit after its commands were queued, ``EXEC``
  answers ``EXECABORT ... OOM``: :func:`is_out_of_memory`);
* ``stalled`` — Celery's soft time limit fired while the task waited on Redis
  or the broker (a stopped or frozen server: the socket stays open and quiet,
  so no socket timeout fires first). A soft limit anywhere else is the task's
  own slowness: a task error.

A leaf module: the middleware, the decision stages and the drainer all ask it.
"""

from __future__ import annotations

from types import TracebackType

import redis
from celery.exceptions import SoftTimeLimitExceeded  # type: ignore[import-untyped]
from kombu.exceptions import OperationalError

#: Errors that say "Redis or the broker is unavailable", not "this message is bad".
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.BusyLoadingError,
    redis.exceptions.OutOfMemoryError,
    # a demoted master (after a failover): a Sentinel client finds the new one on its next connection
    redis.exceptions.ReadOnlyError,
    OperationalError,
    ConnectionError,
)
#: The error prefix of a master refusing writes for lack of replicas (``min-replicas-to-write``).
NO_REPLICAS = "NOREPLICAS"
#: What ``except`` catches to ask :func:`is_out_of_memory`: Redis's ``OOM`` and a transaction
#: discarded at ``EXEC`` (``EXECABORT``, which redis-py raises when no queued command failed).
OUT_OF_MEMORY_CANDIDATES: tuple[type[BaseException], ...] = (
    redis.exceptions.OutOfMemoryError, redis.exceptions.ExecAbortError,
)


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is Redis refusing writes at ``maxmemory``: an ``OOM`` reply, or ``EXEC``
    discarding a transaction for it (``EXECABORT Transaction discarded because of: OOM ...``,
    when memory crossed the limit between queuing the commands and ``EXEC``). Nothing was written."""
    if isinstance(error, redis.exceptions.OutOfMemoryError):
        return True
    return isinstance(error, redis.exceptions.ExecAbortError) and "OOM" in str(error)

class RedisOutOfMemory(redis.exceptions.OutOfMemoryError):
    """Redis refused to record something new: it is at ``maxmemory``. Nothing was written.

    Raised by :func:`tasks.flows.submit.submit_request` (``submit()``) with a
    message naming the request; an ``OutOfMemoryError`` (and a ``RedisError``)
    for existing handlers.
    """

    def __init__(self, what: str) -> None:
        super().__init__(
            f"Redis is out of memory (maxmemory reached; noeviction): {what} was not accepted and "
            "nothing was written; retry once Redis has memory again (free memory or raise maxmemory)"
        )


#: Modules whose frames mean "waiting on Redis or the broker" when a soft time limit fires.
REDIS_WAIT_MODULES = ("redis.", "kombu.", "socket", "selectors", "ssl")
#: Modules of the handler that raises the soft time limit (billiard's SIGUSR1 handler).
SIGNAL_HANDLER_MODULES = ("billiard.", "celery.")


def outage_of(error: BaseException) -> str | None:
    """``unreachable``, ``out_of_memory``, ``stalled``, or None (not an outage: the task's own error)."""
    if is_out_of_memory(error):
        return "out_of_memory"
    if isinstance(error, TRANSIENT_ERRORS):
        return "unreachable"
    if isinstance(error, redis.ResponseError) and str(error).startswith(NO_REPLICAS):
        return "unreachable"  # the server's min-replicas-to-write: nothing was written
    if isinstance(error, SoftTimeLimitExceeded) and waited_on_redis(error.__traceback__):
        return "stalled"
    return None


def waited_on_redis(trace: TracebackType | None) -> bool:
    """Whether the innermost frame of ``trace`` — below the signal handler that raised — is
    in redis-py, kombu or a socket wait."""
    modules: list[str] = []
    while trace is not None:
        modules.append(str(trace.tb_frame.f_globals.get("__name__", "")))
        trace = trace.tb_next
    while modules and modules[-1].startswith(SIGNAL_HANDLER_MODULES):
        modules.pop()
    return bool(modules) and modules[-1].startswith(REDIS_WAIT_MODULES)
