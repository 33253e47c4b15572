"""The Celery tasks: thin wrappers around :mod:`tasks.pipeline` and :mod:`tasks.reschedule`.

Every task runs under :class:`GuardedTask`, the redelivery guard:

* each start of a message is counted in ``gpusched:delivery:<task_id>`` and
  the count is cleared when the task finishes (whatever the outcome), so the
  count is the number of starts that never finished — the pool process died
  (SIGKILL, OOM, hard time limit). Past ``max_crashes`` the message is moved
  to ``gpusched:deadletter`` with its reason and its request gets a terminal
  ``rejected`` result (``error.code = dead_lettered``) instead of looping;
* Redis/broker connection errors requeue the message after a short backoff
  (the state it had written is idempotent, the retry resumes);
* any other exception is retried ``max_task_errors`` times, then dead-lettered.

Steps hand each other a small JSON dict; a step with nothing left to do
raises :class:`celery.exceptions.Ignore`, which acknowledges the message and
stops the chain.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, NoReturn

import redis
from celery import Task, signals  # type: ignore[import-untyped]
from celery.exceptions import Ignore, Reject  # type: ignore[import-untyped]
from kombu.exceptions import OperationalError

from scheduler_core import ErrorOut, ScheduleResult
from tasks import pipeline, reschedule
from tasks.app import (
    CLUSTER_EVENT,
    DECIDE,
    DRAIN_DELAYED,
    PUBLISH,
    RESERVE,
    app,
    commit_chain,
    dispatch_decision,
    dispatch_publish,
)
from tasks.drainer import Drainer, drain_once
from tasks.edge import normalize, request_id_of
from tasks.logging import get_logger
from tasks.runtime import Runtime, get_runtime

log = get_logger(__name__)

#: Errors that say "Redis or the broker is unavailable", not "this message is bad".
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.BusyLoadingError,
    OperationalError,
    ConnectionError,
)


def runtime() -> Runtime:
    """This process's runtime, dispatching decisions through Celery."""
    return get_runtime(dispatch_decision, dispatch_publish)


def request_id_of_args(args: tuple[Any, ...]) -> str:
    """The request a task message concerns ("" for cluster events)."""
    first = args[0] if args else None
    if isinstance(first, str):
        return first
    if isinstance(first, dict):
        if "action" in first and isinstance(first.get("request_id"), str):
            return str(first["request_id"])
        if "kind" in first:
            return ""
        return request_id_of(first)
    return ""


class GuardedTask(Task):  # type: ignore[misc]
    """Base task with the redelivery guard (see the module docstring)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.request.called_directly or not self.request.id:
            return self.run(*args, **kwargs)
        rt = runtime()
        task_id = str(self.request.id)
        try:
            crashes = rt.store.count_delivery(task_id)
        except TRANSIENT_ERRORS as error:
            self._requeue(rt, error)
        if crashes > rt.settings.max_crashes:
            self._dead_letter(rt, args, "worker_lost_repeatedly",
                              f"{crashes - 1} deliveries died before finishing", crashes)
        try:
            outcome = self.run(*args, **kwargs)
        except (Ignore, Reject):
            self._finished(rt, task_id)
            raise
        except TRANSIENT_ERRORS as error:
            self._requeue(rt, error)
        except Exception as error:
            self._failed(rt, args, task_id, error)
        self._finished(rt, task_id)
        return outcome

    def _finished(self, rt: Runtime, task_id: str) -> None:
        try:
            rt.store.clear_delivery(task_id)
        except TRANSIENT_ERRORS:
            log.warning("delivery_count_not_cleared", task_id=task_id)

    def _requeue(self, rt: Runtime, error: BaseException) -> NoReturn:
        log.warning("transient_error_requeue", error=repr(error))
        time.sleep(rt.settings.transient_backoff_s)
        raise Reject(error, requeue=True)

    def _failed(
        self, rt: Runtime, args: tuple[Any, ...], task_id: str, error: Exception
    ) -> NoReturn:
        errors = rt.store.count_error(task_id)
        log.error("task_error", error=repr(error), errors=errors, exc_info=error)
        if errors < rt.settings.max_task_errors:
            rt.store.clear_delivery(task_id)
            time.sleep(rt.settings.transient_backoff_s)
            raise Reject(error, requeue=True)
        rt.store.clear_errors(task_id)
        self._dead_letter(rt, args, "task_error", f"{type(error).__name__}: {error}", errors)

    def _dead_letter(
        self, rt: Runtime, args: tuple[Any, ...], reason: str, detail: str, count: int
    ) -> NoReturn:
        request_id = request_id_of_args(args)
        rejection = ScheduleResult(
            request_id=request_id or "-",
            status="rejected",
            error=ErrorOut(
                code="dead_lettered",
                message=f"gave up on {self.name} after {count} deliveries: {detail}",
                field=None,
            ),
        )
        request_json = ""
        if args and isinstance(args[0], dict) and "action" not in args[0] and "kind" not in args[0]:
            request_json = normalize(args[0]).request_json
        rt.store.dead_letter(
            request_id=request_id, task_name=self.name, task_id=str(self.request.id),
            reason=reason, detail=detail, deliveries=count,
            args_json=json.dumps(list(args), default=str), rejected_json=rejection.model_dump_json(),
            request_json=request_json,
        )
        rt.store.clear_delivery(str(self.request.id))
        log.error("dead_lettered", reason=reason, detail=detail, request_id=request_id)
        raise Ignore()


def _continue(step: pipeline.Step | None) -> dict[str, Any]:
    if step is None:
        raise Ignore()
    return step.to_dict()


@app.task(name=DECIDE, base=GuardedTask, bind=True)  # type: ignore[untyped-decorator]
def decide(self: GuardedTask, request: Any, seq: int = 0, attempt: int = 0) -> dict[str, Any]:
    """Decide a placement for a request id (or a raw Contract 1 request).

    A bare ``gpusched.decide`` message (no chain attached, e.g. from a foreign
    Celery client) continues with the default reserve → publish steps. When
    the decision needs no reservation step (booked inside the decide lease,
    rejected, or to be parked) the chain's next ``gpusched.reserve`` is skipped.
    """
    step = _continue(pipeline.decide(runtime(), request, seq, attempt, str(self.request.id)))
    remaining = self.request.chain
    if not remaining and not self.request.callbacks:
        commit_chain(step).apply_async()
    elif step["action"] != "reserve" and remaining and remaining[-1].get("task") == RESERVE:
        remaining.pop()  # booked inside the decide lease (or nothing to book): skip the no-op hop
    return step


@app.task(name=RESERVE, base=GuardedTask, bind=True)  # type: ignore[untyped-decorator]
def reserve(self: GuardedTask, step: dict[str, Any]) -> dict[str, Any]:
    """Book the decided placement atomically (or queue a fresh decision on conflict)."""
    return _continue(pipeline.reserve(runtime(), pipeline.Step.from_dict(step)))


@app.task(name=PUBLISH, base=GuardedTask, bind=True)  # type: ignore[untyped-decorator]
def publish(self: GuardedTask, step: dict[str, Any]) -> str | None:
    """Publish the terminal result, or park the request."""
    outcome = pipeline.publish(runtime(), pipeline.Step.from_dict(step))
    log.info("request_finished", outcome=outcome, request_id=step.get("request_id"))
    return outcome


@app.task(name=CLUSTER_EVENT, base=GuardedTask, bind=True)  # type: ignore[untyped-decorator]
def cluster_event(self: GuardedTask, event: Any) -> dict[str, Any]:
    """Apply one cluster event (see :mod:`tasks.reschedule`)."""
    summary = reschedule.handle_cluster_event(runtime(), event)
    log.info("cluster_event", summary=summary)
    return summary


@app.task(name=DRAIN_DELAYED, base=GuardedTask, bind=True)  # type: ignore[untyped-decorator]
def drain_delayed(self: GuardedTask) -> dict[str, int]:
    """Enqueue due outbox entries and fire due timers (workers also do this on their own)."""
    return drain_once(runtime())


_DRAINER: Drainer | None = None
#: Drainer passes between two node heartbeats in ``gpusched:nodes``.
HEARTBEAT_EVERY = 20


def _heartbeat(rt: Runtime, node: str, ready_ms: int) -> None:
    beat = {"pid": os.getpid(), "ready_ms": ready_ms, "seen_ms": rt.store.now_ms()}
    rt.client.hset(rt.keys.nodes, node, json.dumps(beat))


@signals.worker_ready.connect  # type: ignore[untyped-decorator]
def _start_drainer(sender: Any = None, **_: Any) -> None:
    global _DRAINER
    rt = runtime()
    node = str(getattr(sender, "hostname", "") or f"pid-{os.getpid()}")
    ready_ms = rt.store.now_ms()
    _heartbeat(rt, node, ready_ms)
    passes = iter(range(1, 1 << 62))

    def work() -> None:
        current = runtime()
        drain_once(current)
        if next(passes) % HEARTBEAT_EVERY == 0:
            _heartbeat(current, node, ready_ms)

    _DRAINER = Drainer(rt.settings.drain_interval_s, work)
    _DRAINER.start()
    log.info("worker_node_ready", node=node)


@signals.worker_shutting_down.connect  # type: ignore[untyped-decorator]
def _stop_drainer(sender: Any = None, **_: Any) -> None:
    if _DRAINER is not None:
        _DRAINER.stop()
    try:
        runtime().client.hdel(runtime().keys.nodes, str(sender or ""))
    except TRANSIENT_ERRORS:
        log.warning("node_not_unregistered", node=str(sender))
