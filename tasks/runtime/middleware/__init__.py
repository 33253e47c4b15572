"""Worker middleware, one concern per module (dramatiq-style).

Around every task message, outermost first (:data:`TASK_STACK`):

* :mod:`~tasks.runtime.middleware.collector` — the garbage collector is paused for
  the message and runs between messages (young generations collected, the rest frozen,
  the whole heap collected every ``collector_refresh_s``);
* :mod:`~tasks.runtime.middleware.transient` — Redis/broker outages requeue
  the message after a back-off, never counted as a failure;
* :mod:`~tasks.runtime.middleware.queue_guard` — each queue runs only its
  own tasks (a ``cluster_event`` pushed onto the requests queue is
  dead-lettered, never run);
* :mod:`~tasks.runtime.middleware.replica_ack` — what a task wrote is
  acknowledged once a replica holds it (with replicas required);
* :mod:`~tasks.runtime.middleware.argument_guard` — a message whose
  arguments its task cannot take (an unexpected keyword, a wrong type) is
  dead-lettered alone, never retried, and finishes no request;
* :mod:`~tasks.runtime.middleware.data_guard` — a Redis that lost the
  service's data (wiped, rolled back) runs nothing: messages are requeued
  until a recovery;
* :mod:`~tasks.runtime.middleware.redelivery_guard` — deliveries whose process
  died are counted; past ``max_crashes`` the message is dead-lettered;
* :mod:`~tasks.runtime.middleware.task_errors` — unexpected exceptions are
  retried ``max_task_errors`` times, then dead-lettered.

Around the worker node's life (:data:`NODE_STACK`, in order on boot and on
shutdown):

* :mod:`~tasks.runtime.middleware.data_guard` — learns (or writes) the data
  generation before the node serves;
* :mod:`~tasks.runtime.middleware.node_heartbeat` — the node's entry in
  ``gpusched:nodes``;
* :mod:`~tasks.runtime.middleware.decider_standby` — with ``decider_standby``,
  the thread keeping (or waiting for) the partition's decider presence;
* :mod:`~tasks.runtime.middleware.delay_drainer` — the thread draining the
  outbox, follow-ups and timers;
* :mod:`~tasks.runtime.middleware.metrics_server` — ``/metrics`` and
  ``/healthz`` on ``metrics_port``;
* :mod:`~tasks.runtime.middleware.audit_retention` — the thread running the
  audit retention pass (checkpoints, trimming, parked-request expiry).

Dead-lettering itself (:mod:`~tasks.runtime.middleware.dead_letters`) is the
action the guard and the retries share; :mod:`~tasks.runtime.middleware.request_logging`
binds the ``request_id`` of every log line (wired to Celery's publish and
prerun signals in :mod:`tasks.runtime.celery_app`).
"""

from __future__ import annotations

from tasks.runtime.middleware.argument_guard import WellFormedArguments
from tasks.runtime.middleware.audit_retention import AuditRetention
from tasks.runtime.middleware.base import Delivery, Middleware, run_task
from tasks.runtime.middleware.collector import CollectBetweenMessages
from tasks.runtime.middleware.data_guard import RefuseWithoutData
from tasks.runtime.middleware.decider_standby import DeciderStandby
from tasks.runtime.middleware.delay_drainer import DelayDrainer
from tasks.runtime.middleware.metrics_server import MetricsServer
from tasks.runtime.middleware.node_heartbeat import NodeHeartbeat
from tasks.runtime.middleware.queue_guard import OnlyItsOwnQueue
from tasks.runtime.middleware.redelivery_guard import RedeliveryGuard
from tasks.runtime.middleware.replica_ack import AcknowledgeWrites
from tasks.runtime.middleware.task_errors import RetryTaskErrors
from tasks.runtime.middleware.transient import RequeueOnOutage

_GUARD = RedeliveryGuard()
_DATA_GUARD = RefuseWithoutData()
#: Around every task message, outermost first.
TASK_STACK: tuple[Middleware, ...] = (
    CollectBetweenMessages(),
    RequeueOnOutage(_GUARD.finished), OnlyItsOwnQueue(), WellFormedArguments(), AcknowledgeWrites(),
    _DATA_GUARD, _GUARD,
    RetryTaskErrors(),
)
#: Boot and shutdown hooks of a worker node, in order.
NODE_STACK: tuple[Middleware, ...] = (
    _DATA_GUARD, NodeHeartbeat(), DeciderStandby(), DelayDrainer(), MetricsServer(), AuditRetention(),
)

__all__ = ["NODE_STACK", "TASK_STACK", "Delivery", "Middleware", "run_task"]
