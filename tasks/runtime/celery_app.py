"""The Celery app (``celery -A tasks.app worker`` / ``gpusched worker``) and how messages are sent.

Configuration choices (see ``docs/service.md``):

* JSON only; no result backend (results go to Redis Streams, not Celery).
* ``acks_late`` + prefetch 1: a message is acknowledged only after its task
  returns, one message reserved per pool process.
* ``reject_on_worker_lost``: a pool process killed mid-task (SIGKILL, OOM)
  puts its message back at once; the redelivery guard
  (:mod:`tasks.runtime.middleware.redelivery_guard`) dead-letters a message
  whose deliveries keep dying, so a poison message cannot loop forever.
* ``acks_on_timeout=False``: a hard time limit also requeues (and counts as
  a crash for the guard).
* ``worker_cancel_long_running_tasks_on_connection_loss=False``: a lost broker
  connection does not terminate the task in flight (Celery's default from 6.0
  does): its state writes retry on their own connections, and a terminated
  task looked like a crash to the redelivery guard, so a few connection resets
  dead-lettered a valid request. The held message is handed out again at the
  reconnect and its duplicate delivery finds the attempt decided.
* The visibility timeout stays above the task time limit, and no countdown
  exceeds half of it (enforced by :class:`tasks.base.settings.Settings`);
  longer delays live in the ``outbox``/``timers`` sorted sets drained by
  :mod:`tasks.runtime.drainer`.
* Queues are drained in name order (``queue_order_strategy="sorted"``):
  ``.cluster`` before ``.commits`` before ``.requests``, so cluster events and
  leftover steps finish before new requests start.
* The broker door (:mod:`tasks.runtime.broker_door`, set as ``broker_transport``
  and ``worker_consumer``): a message no task could use is dead-lettered, never
  fatal to the consumer nor silently dropped. Its channel is
  :class:`tasks.runtime.broker.RideOutChannel`: the worker rides out a Redis
  at ``maxmemory`` (it keeps the message it holds and waits instead of
  exiting), and each message carries the queue it was really taken from.
  With an explicit transport kombu no
  longer reads TLS from the ``rediss://`` scheme, so a ``rediss://`` URL sets
  ``broker_use_ssl`` (certificates verified, as redis-py does for the state
  clients; ``?ssl_cert_reqs=none`` in the URL opts out).
* Through Sentinel (``redis_sentinels``) the broker URL lists the Sentinels
  and the transport is the door's Sentinel variant, which follows the master
  across a failover (:mod:`tasks.state.sentinel`).
* Every queue is declared in the configuration (``task_queues``), so a plain
  ``celery -A tasks.app worker`` (no ``-Q``) consumes the same three queues
  as ``gpusched worker``.

The module-level :data:`app` is the worker's, configured from the process
settings. A client talking to a deployment sends through its own app
(:func:`client_app`, configured for the client's settings), so clients for
several deployments can live in one process without reconfiguring a shared one.
"""

from __future__ import annotations

import os
import ssl
import warnings
from typing import Any
from urllib.parse import parse_qs, urlsplit

import structlog
from celery import Celery, signals  # type: ignore[import-untyped]
from celery.exceptions import CPendingDeprecationWarning  # type: ignore[import-untyped]
from kombu.entity import Exchange, Queue

from tasks.base import logging as service_logging
from tasks.base.keys import Keys
from tasks.base.settings import Settings, SettingsError, get_settings
from tasks.flows import metrics
from tasks.runtime import preflight
from tasks.runtime.broker import shutting_down
from tasks.runtime.middleware import NODE_STACK, request_logging
from tasks.runtime.middleware.queue_guard import accepted_tasks
from tasks.runtime.standby import FollowTheGate
from tasks.runtime.task_contract import CLUSTER_EVENT, DECIDE, DECIDE_BATCH, RESUME
from tasks.state.context import Runtime, get_runtime
from tasks.state.sentinel import broker_config, broker_transport_options

app = Celery("gpusched", include=["tasks.runtime.worker_tasks"])
app.steps["consumer"].add(FollowTheGate)  # decider_standby: the consumer's queues follow the gate



def _quiet_cancel_warning() -> None:
    """Celery warns on every broker connection loss that it will cancel in-flight tasks by default
    in 6.0; the service turns that off on purpose (``celery_config``), so the warning is noise.
    Installed once the node is up (Celery's own log set-up turns its warnings to ``always``)."""
    warnings.filterwarnings("ignore", message=r"\s*In Celery 5\.1 we introduced an optional breaking",
                            category=CPendingDeprecationWarning)


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery settings for ``settings`` (pure; used by the apps and the tests)."""
    keys = Keys(settings.cluster)
    return {
        "broker_url": settings.redis_url,
        "broker_user": settings.redis_username,
        "broker_password": settings.redis_password.get_secret_value() if settings.redis_password else None,
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
            **(broker_transport_options(settings) if settings.redis_sentinels else {}),
            # kombu's own keys carry the partition (docs/security.md: ACL key patterns per partition)
            "unacked_key": keys.unacked,
            "unacked_index_key": keys.unacked_index,
            "unacked_mutex_key": keys.unacked_mutex,
        },
        **partition_isolation(keys),
        "broker_connection_retry_on_startup": True,
        # a lost broker connection is no reason to kill the task in flight: its state writes
        # retry on their own connections, and the redelivery guard must count only deliveries
        # whose process died (a terminated task looked like a crash: docs/service.md)
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        "worker_hijack_root_logger": False,
        "worker_concurrency": settings.worker_concurrency,
        "broker_transport": "tasks.runtime.broker_door:Transport",
        "worker_consumer": "tasks.runtime.broker_door:DoorConsumer",
        **(broker_config(settings) if settings.redis_sentinels else broker_tls(settings.redis_url)),
        "task_default_queue": keys.requests_queue,
        "task_queues": declared_queues(keys, declare=settings.submit_via == "record"),
        # each task to the one queue that runs it (the queue guard refuses it anywhere else)
        "task_routes": {
            task: {"queue": queue} for queue, names in accepted_tasks(keys).items() for task in sorted(names)
        },
    }


def partition_isolation(keys: Keys) -> dict[str, Any]:
    """Celery settings that keep a partition's broker traffic under its own names.

    Unpartitioned: none (Celery's defaults). With a cluster id, the event exchange
    carries the partition's tag, and remote control is off: its pidbox queues,
    their binding tables and kombu's global ``_kombu.binding_deadlines`` (whose
    sweep deletes other exchanges' tables) would be shared by every partition of
    the database, which their ACL users must not reach (``docs/security.md``).
    """
    if keys.event_exchange is None:
        return {}
    return {"event_exchange": keys.event_exchange, "worker_enable_remote_control": False}


def broker_tls(url: str) -> dict[str, Any]:
    """``broker_use_ssl`` for a ``rediss://`` URL without ``ssl_*`` options (verify certificates)."""
    parts = urlsplit(url)
    if parts.scheme != "rediss" or any(key.startswith("ssl_") for key in parse_qs(parts.query)):
        return {}
    return {"broker_use_ssl": {"ssl_cert_reqs": ssl.CERT_REQUIRED}}


def declared_queues(keys: Keys, *, declare: bool = True) -> list[Queue]:
    """The partition's queues as a worker consumes them by default (no ``-Q``), in drain order.

    Each is declared as Celery declares a queue it routes to without a
    declaration (a direct exchange of the queue's name, routing key = name),
    so senders and consumers agree whichever side declared it first.

    Args:
        declare: false for a sender that may only push messages (the submitter
            ACL user cannot write kombu's bindings): it relies on the workers
            having declared the queues.
    """
    return [
        Queue(name, Exchange(name, type="direct"), routing_key=name,  # type: ignore[no-untyped-call]
              no_declare=not declare)
        for name in keys.queues
    ]


def client_app(settings: Settings) -> Celery:
    """A Celery app that only sends messages to the deployment ``settings`` name.

    Close it with ``close()`` when done (it owns its broker connections).
    """
    client = Celery("gpusched-client", set_as_current=False)
    client.conf.update(celery_config(settings))
    return client


class TaskSender:
    """Sends the service's task messages through one Celery app.

    Each message carries the ``request_id`` bound in the sender's logging
    context as a header (see :mod:`tasks.runtime.middleware.request_logging`).
    """

    __slots__ = ("_app",)

    def __init__(self, celery: Celery) -> None:
        self._app = celery

    def decide(self, request_id: str, seq: int, attempt: int, countdown: float) -> None:
        """Send ``gpusched.decide(request_id, seq, attempt)`` (the runtime's ``dispatch``)."""
        with structlog.contextvars.bound_contextvars(request_id=request_id):
            self._app.send_task(DECIDE, args=(request_id, seq, attempt), countdown=countdown or None)

    def decide_batch(self, items: list[tuple[str, int, int]]) -> None:
        """Send ``gpusched.decide_batch(items)`` (the runtime's ``dispatch_batch``)."""
        self._app.send_task(DECIDE_BATCH, args=([list(item) for item in items],))

    def submit(self, request: Any) -> str:
        """Send a raw request as ``gpusched.decide``'s argument (a worker records it); returns its id."""
        with structlog.contextvars.bound_contextvars(request_id=_request_id(request)):
            return str(self._app.send_task(DECIDE, args=(request,)).id)

    def resume(self, step: dict[str, Any]) -> None:
        """Send ``gpusched.resume(step)`` for a leftover step (the runtime's ``resume``)."""
        with structlog.contextvars.bound_contextvars(request_id=step.get("request_id")):
            self._app.send_task(RESUME, args=(step,))

    def cluster_event(self, event: Any) -> str:
        """Send ``gpusched.cluster_event(event)``; returns the message id."""
        return str(self._app.send_task(CLUSTER_EVENT, args=(event,)).id)


def _request_id(request: Any) -> str | None:
    value = request.get("request_id") if isinstance(request, dict) else None
    return value if isinstance(value, str) else None


_WORKER_SENDER = TaskSender(app)


def worker_runtime() -> Runtime:
    """This thread's runtime in a worker process, sending through :data:`app`."""
    return get_runtime(_WORKER_SENDER.decide, _WORKER_SENDER.resume, _WORKER_SENDER.decide_batch)


# ------------------------------------------------------------- Celery signals
@signals.setup_logging.connect  # type: ignore[untyped-decorator]
def _setup_logging(**_: Any) -> None:
    settings = get_settings()
    service_logging.configure_logging(settings.log_format, settings.log_level)


@signals.before_task_publish.connect  # type: ignore[untyped-decorator]
def _before_publish(headers: dict[str, Any] | None = None, **_: Any) -> None:
    request_logging.add_request_header(headers)


@signals.task_prerun.connect  # type: ignore[untyped-decorator]
def _before_task(
    task_id: str | None = None, task: Any = None, args: Any = None, kwargs: Any = None, **_: Any
) -> None:
    request_logging.bind_task(task_id, task, args, kwargs)


@signals.task_postrun.connect  # type: ignore[untyped-decorator]
def _after_task(**_: Any) -> None:
    request_logging.unbind_task()


@signals.worker_init.connect  # type: ignore[untyped-decorator]
def _worker_init(**_: Any) -> None:
    settings = get_settings()
    try:  # before anything is consumed: a chain the tasks cannot load stops the node (exit 2)
        preflight.check_configuration(settings)
    except SettingsError as error:
        preflight.refuse_to_start(error)
    # before the pool forks: every pool process then counts into the node's metrics directory
    if settings.metrics_port:
        metrics.prepare_multiprocess()


@signals.worker_ready.connect  # type: ignore[untyped-decorator]
def _worker_ready(sender: Any = None, **_: Any) -> None:
    node = str(getattr(sender, "hostname", "") or f"pid-{os.getpid()}")
    _quiet_cancel_warning()
    for middleware in NODE_STACK:
        middleware.after_worker_boot(node, worker_runtime)


@signals.worker_shutting_down.connect  # type: ignore[untyped-decorator]
def _worker_shutting_down(sender: Any = None, **_: Any) -> None:
    node = str(sender or "")
    shutting_down()  # a refused broker write stops waiting for memory
    for middleware in NODE_STACK:
        middleware.before_worker_shutdown(node, worker_runtime)


app.conf.update(celery_config(get_settings()))
