"""The Celery app ``tasks.app:app`` (``celery -A tasks.app worker`` / ``gpusched worker``).

Configuration choices (see ``docs/service.md`` and the ecosystem memo):

* JSON only; no result backend (results go to Redis Streams, not Celery).
* ``acks_late`` + prefetch 1: a message is acknowledged only after its task
  returns, one message reserved per pool process.
* ``reject_on_worker_lost``: a pool process killed mid-task (SIGKILL, OOM)
  puts its message back at once; the redelivery guard in
  :mod:`tasks.worker_tasks` dead-letters a message whose deliveries keep
  dying, so a poison message cannot loop forever.
* ``acks_on_timeout=False``: a hard time limit also requeues (and counts as
  a crash for the guard).
* The visibility timeout stays above the task time limit, and no countdown
  exceeds half of it (enforced by :class:`tasks.settings.Settings`); longer
  delays live in the ``outbox``/``timers`` sorted sets drained by
  :mod:`tasks.drainer`.
* Queues are drained in name order (``queue_order_strategy="sorted"``):
  ``.cluster`` before ``.commits`` before ``.requests``, so cluster events and
  in-flight decisions finish before new requests start.
"""

from __future__ import annotations

from typing import Any

import structlog
from celery import Celery, chain, signals  # type: ignore[import-untyped]
from celery.canvas import Signature  # type: ignore[import-untyped]

from tasks import logging as service_logging
from tasks.keys import Keys
from tasks.messages import (
    CLUSTER_EVENT,
    DECIDE,
    DRAIN_DELAYED,
    PUBLISH,
    RESERVE,
    message_request,
)
from tasks.settings import Settings, get_settings

app = Celery("gpusched", include=["tasks.worker_tasks"])


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery settings for ``settings`` (pure; used by :func:`configure` and tests)."""
    keys = Keys(settings.cluster)
    return {
        "broker_url": settings.redis_url,
        "result_backend": None,
        "task_ignore_result": True,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_acks_on_failure": True,
        "task_acks_on_timeout": False,
        "worker_prefetch_multiplier": 1,
        "task_time_limit": settings.task_time_limit_s,
        "task_soft_time_limit": settings.task_soft_time_limit_s,
        "broker_transport_options": {
            "visibility_timeout": settings.visibility_timeout_s,
            "unacked_restore_interval": settings.unacked_restore_interval_s,
            "unacked_restore_throttle": 1,
            "queue_order_strategy": "sorted",
            "socket_connect_timeout": settings.redis_socket_connect_timeout_s,
            "health_check_interval": settings.redis_health_check_interval_s,
        },
        "broker_connection_retry_on_startup": True,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "worker_hijack_root_logger": False,
        "worker_concurrency": settings.worker_concurrency,
        "task_default_queue": keys.requests_queue,
        "task_routes": {
            DECIDE: {"queue": keys.requests_queue},
            RESERVE: {"queue": keys.commits_queue},
            PUBLISH: {"queue": keys.commits_queue},
            CLUSTER_EVENT: {"queue": keys.cluster_queue},
            DRAIN_DELAYED: {"queue": keys.cluster_queue},
        },
    }


def configure(settings: Settings | None = None) -> Celery:
    """(Re)configure the app from settings (a client may point it at another Redis)."""
    config = celery_config(settings or get_settings())
    if app.conf.get("broker_url") not in (None, config["broker_url"]):
        _drop_broker_connections()
    app.conf.update(config)
    return app


def _drop_broker_connections() -> None:
    """Forget pooled broker connections and producers (what Celery does after a fork).

    ``Celery.close()`` would also deregister the app; this only resets the pools
    so the next publish connects to the newly configured broker.
    """
    pool = app._pool
    if pool is not None:
        pool.force_close_all()
    app._pool = None
    amqp = app.__dict__.get("amqp")
    if amqp is not None:
        amqp._producer_pool = None


def decision_chain(request: Any, seq: int = 0, attempt: int = 0) -> Signature:
    """decide → reserve → publish for one request id (or raw request dict).

    For callers composing the steps themselves; ``decide`` drops the two
    later hops when it finished the request (see :func:`dispatch_decision`).
    """
    return chain(
        app.signature(DECIDE, args=(request, seq, attempt)),
        app.signature(RESERVE),
        app.signature(PUBLISH),
    )


def commit_chain(step: dict[str, Any]) -> Signature:
    """reserve → publish for a decided step (continues a bare ``gpusched.decide``)."""
    return chain(app.signature(RESERVE, args=(step,)), app.signature(PUBLISH))


def dispatch_publish(step: dict[str, Any]) -> None:
    """Send one ``gpusched.publish`` step (the :data:`tasks.runtime.Resume` hook)."""
    with structlog.contextvars.bound_contextvars(request_id=step.get("request_id")):
        app.signature(PUBLISH, args=(step,)).apply_async()


def dispatch_decision(request_id: str, seq: int, attempt: int, countdown: float) -> None:
    """Send a decision (the :data:`tasks.runtime.Dispatch` used by tasks and clients).

    A bare ``gpusched.decide``: the task books and publishes in its own round
    trip, and attaches :func:`commit_chain` itself only when a step is left.
    """
    with structlog.contextvars.bound_contextvars(request_id=request_id):
        app.signature(DECIDE, args=(request_id, seq, attempt)).apply_async(countdown=countdown or None)


@signals.setup_logging.connect  # type: ignore[untyped-decorator]
def _setup_logging(**_: Any) -> None:
    settings = get_settings()
    service_logging.configure_logging(settings.log_format, settings.log_level)


@signals.before_task_publish.connect  # type: ignore[untyped-decorator]
def _propagate_request_id(headers: dict[str, Any] | None = None, **_: Any) -> None:
    request_id = service_logging.current_request_id()
    if headers is not None and request_id and "request_id" not in headers:
        headers["request_id"] = request_id


@signals.task_prerun.connect  # type: ignore[untyped-decorator]
def _bind_task(
    task_id: str | None = None, task: Any = None, args: Any = None, kwargs: Any = None, **_: Any
) -> None:
    name = getattr(task, "name", None)
    driven = message_request(name, args if isinstance(args, list | tuple) else (), kwargs)
    request_id = driven.request_id if driven else getattr(getattr(task, "request", None), "request_id", None)
    service_logging.bind_task(task_id, name, request_id)


@signals.task_postrun.connect  # type: ignore[untyped-decorator]
def _clear_task(**_: Any) -> None:
    service_logging.clear()


configure()
