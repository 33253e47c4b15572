"""The worker's door to the broker: no message a queue can hold stops a worker or vanishes.

A refused message is dead-lettered on ``gpusched:deadletter`` with its
reason, a one-line detail and a bounded excerpt, and the worker goes on
consuming. Two public extension points carry it, outermost first:

* :class:`Transport` (Celery's ``broker_transport``): kombu's Redis transport
  whose channels answer ``BRPOP`` (and ``RPOP``) through a redis-py response
  callback (:meth:`redis.Redis.set_response_callback`). The callback runs
  :func:`tasks.intake.broker_messages.inspect_message` on the popped bytes
  before kombu parses them; a refused message is dead-lettered and the
  callback reports an empty pop, so kombu goes on as after an idle poll. This
  covers what used to stop the consumer outright (not UTF-8, not JSON, no
  envelope, a body nested deeply enough to break the pickling for the pool
  child) and what Celery would only log and drop (wrong content type, an
  undecodable body, an unknown task).
  :class:`SentinelTransport` is the same door on kombu's Sentinel transport
  (``redis_sentinels``).
* :class:`DoorConsumer` (Celery's ``worker_consumer``): Celery's consumer with
  its public hooks for unusable messages — ``on_decode_error``,
  ``on_unknown_message``, ``on_unknown_task``, ``on_invalid_task`` — dead-lettering
  instead of logging and dropping, and its task handler
  (``create_task_handler``) wrapped so that any other exception while the
  parent turns a message into a task is dead-lettered instead of stopping the
  consumer. Messages reach it only past the transport's check, so this is the
  second line (e.g. an ETA that does not parse).

A ``gpusched.decide`` message whose raw request nests too deeply also gives
that request its terminal ``rejected`` result, naming the field
(``dead_letter.lua`` records and finishes it).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import redis
from celery.worker.consumer import Consumer  # type: ignore[import-untyped]
from kombu.transport import redis as kombu_redis

from tasks.base.logging import get_logger
from tasks.base.settings import get_settings
from tasks.flows import metrics
from tasks.intake.broker_messages import Verdict, excerpt_of, inspect_message
from tasks.intake.limits import MAX_JSON_DEPTH
from tasks.intake.requests import service_rejection
from tasks.runtime.broker import RideOutChannel
from tasks.runtime.celery_app import worker_runtime
from tasks.runtime.task_contract import CLUSTER_EVENT, DECIDE, DECIDE_BATCH, DRAIN_DELAYED, RESUME
from tasks.state.outages import TRANSIENT_ERRORS

log = get_logger(__name__)
#: kombu's ``reject_log_error`` logs through a standard logger (positional arguments).
_kombu_log = logging.getLogger(__name__)

#: The task names the workers run; any other is refused at the door.
SERVICE_TASKS = frozenset({DECIDE, DECIDE_BATCH, RESUME, CLUSTER_EVENT, DRAIN_DELAYED})
#: Attempts to write a dead letter while Redis is unreachable (the message is already popped).
DEAD_LETTER_ATTEMPTS = 5


# ----------------------------------------------------------------- dead letters
def dead_letter(verdict: Verdict, queue: str) -> None:
    """Dead-letter a refused message (and reject the request a too-deep intake message carries).

    Retried while Redis is unreachable; if it never answers, the refusal is
    logged with its excerpt (the message was popped, as kombu pops every message).
    A written dead letter counts in ``gpusched_dead_letters_total{reason}``.
    """
    request = verdict.request
    rejected = ""
    stub = ""
    if request is not None:
        message = f"nests more than {MAX_JSON_DEPTH} levels deep"
        rejected = service_rejection(request.request_id, request.field, message).model_dump_json()
        stub = json.dumps({"invalid": f"{request.field}: {message}", "request_id": request.request_id},
                          sort_keys=True, separators=(",", ":"))
    args = json.dumps({"queue": queue, "bytes": verdict.size, "excerpt": verdict.excerpt})
    settings = get_settings()
    for attempt in range(1, DEAD_LETTER_ATTEMPTS + 1):
        try:
            worker_runtime().deliveries.dead_letter(
                request_id=request.request_id if request else "", task_name=verdict.task,
                task_id=verdict.task_id, reason=verdict.reason, detail=verdict.detail, deliveries=1,
                args_json=args, rejected_json=rejected, intake_task=verdict.task_id if request else "",
                request_json=stub,
            )
            break
        except TRANSIENT_ERRORS as error:
            if attempt == DEAD_LETTER_ATTEMPTS:
                log.error("dead_letter_failed", reason=verdict.reason, detail=verdict.detail,
                          excerpt=verdict.excerpt, queue=queue, error=repr(error))
                return
            time.sleep(settings.transient_backoff_s)
    # counted once written (as the middleware's give_up does); this is the node's main process,
    # whose counts reach /metrics through the same multiprocess directory as the pool's
    metrics.count_dead_letter(verdict.reason)
    log.error("message_dead_lettered", reason=verdict.reason, detail=verdict.detail, queue=queue,
              task=verdict.task, task_id=verdict.task_id,
              request_id=request.request_id if request else None)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return _text(value).encode("utf-8", "surrogatepass")


# -------------------------------------------------------------------- transport
def _guarded(inspect: Callable[[bytes], Verdict | None], original: Any) -> Callable[..., Any]:
    """A BRPOP/RPOP response callback: the original's reply, or None for a refused message."""

    def callback(response: Any, **options: Any) -> Any:
        reply = original(response, **options) if original is not None else response
        if not reply:
            return reply
        queue, item = reply if isinstance(reply, tuple | list) else (b"", reply)
        verdict = inspect(_bytes(item))
        if verdict is None:
            return reply
        try:
            dead_letter(verdict, _bytes(queue).decode("utf-8", "replace"))
        except Exception as error:  # the door never stops the consumer: say what was refused
            log.error("dead_letter_failed", reason=verdict.reason, detail=verdict.detail,
                      excerpt=verdict.excerpt, error=repr(error))
        return None

    return callback


def _inspect(item: bytes) -> Verdict | None:
    settings = get_settings()
    return inspect_message(item, max_bytes=settings.max_message_bytes, tasks=SERVICE_TASKS,
                           intake_task=DECIDE, max_time_limit=settings.task_time_limit_s,
                           max_delay=settings.visibility_timeout_s / 2)


def guard_client(client: redis.Redis) -> redis.Redis:
    """Make ``client`` refuse bad messages in its ``BRPOP`` and ``RPOP`` replies."""
    for command in ("BRPOP", "RPOP"):
        original = client.response_callbacks.get(command)  # type: ignore[no-untyped-call]
        client.set_response_callback(command, _guarded(_inspect, original))
    return client


def _guarded_client(factory: Callable[..., redis.Redis], *args: Any, **kwargs: Any) -> redis.Redis:
    return guard_client(factory(*args, **kwargs))


class GuardedChannel(RideOutChannel):
    """kombu's Redis channel whose pops are checked before kombu parses them.

    Based on :class:`tasks.runtime.broker.RideOutChannel`: out-of-memory
    writes are ridden out and each message carries the queue it came from.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        guard_client(self.client)  # the BRPOP client (created by the base class's ping)
        self.Client = partial(_guarded_client, self.Client)  # the clients of synchronous gets


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`GuardedChannel` (``broker_transport``)."""

    Channel = GuardedChannel


class GuardedSentinelChannel(GuardedChannel, kombu_redis.SentinelChannel):
    """:class:`GuardedChannel` on kombu's Sentinel channel: the same door, the master found
    through Sentinel (``master_name``, ``sentinel_kwargs``; :mod:`tasks.state.sentinel`)."""


class SentinelTransport(kombu_redis.SentinelTransport):
    """kombu's Sentinel transport with :class:`GuardedSentinelChannel` (``broker_transport``
    through Sentinel)."""

    Channel = GuardedSentinelChannel


# --------------------------------------------------------------------- consumer
class DoorConsumer(Consumer):  # type: ignore[misc]
    """Celery's consumer, dead-lettering the messages it cannot use (``worker_consumer``)."""

    def create_task_handler(self, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
        """Celery's task handler, with any exception it raises dead-lettered instead of fatal."""
        handle = super().create_task_handler(*args, **kwargs)

        def on_task_received(message: Any) -> Any:
            try:
                return handle(message)
            except Exception as error:
                self.refuse(message, "task_handler_error", _describe(error))
                return None

        return on_task_received

    def on_decode_error(self, message: Any, exc: BaseException) -> None:
        """The body could not be decoded (Celery logs and acknowledges it)."""
        self.refuse(message, "decode_error", _describe(exc))

    def on_unknown_message(self, body: Any, message: Any) -> None:
        """Not a task message (Celery logs and rejects it)."""
        self.refuse(message, "unknown_message", "message is not a Celery task message")

    def on_unknown_task(self, body: Any, message: Any, exc: BaseException) -> None:
        """A task this worker does not run (Celery logs and rejects it)."""
        self.refuse(message, "unknown_task", _describe(exc))

    def on_invalid_task(self, body: Any, message: Any, exc: BaseException) -> None:
        """A task message Celery refuses (content type, bad ETA...; Celery logs and rejects it)."""
        self.refuse(message, "invalid_task", _describe(exc))

    def refuse(self, message: Any, reason: str, detail: str) -> None:
        """Dead-letter ``message`` and take it off the queue."""
        headers = message.headers if isinstance(message.headers, dict) else {}
        raw = message.body if message.body is not None else b""
        verdict = Verdict(reason, detail, excerpt_of(_bytes(raw)), len(_bytes(raw)),
                          task=_text(headers.get("task") or ""), task_id=_text(headers.get("id") or ""))
        info = message.delivery_info if isinstance(message.delivery_info, dict) else {}
        dead_letter(verdict, _text(info.get("routing_key") or ""))
        if not message.acknowledged:
            message.reject_log_error(_kombu_log, self.connection_errors)


def _describe(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text[:200]}" if text else type(error).__name__
