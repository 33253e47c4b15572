"""The Celery tasks: thin wrappers around :mod:`tasks.pipeline` and :mod:`tasks.reschedule`.

Every task runs under :class:`GuardedTask`, the redelivery guard:

* each start of a message is counted in ``gpusched:delivery:<task_id>`` and
  the count is cleared whenever a delivery ends without its process dying
  (success, ``Ignore``, an error, a requeue after a Redis/broker error), so
  the count is the number of starts that never finished — the pool process
  died (SIGKILL, OOM, hard time limit). A clear that fails because Redis is
  unreachable is retried by this process before its next task. Past
  ``max_crashes`` the message is moved to ``gpusched:deadletter`` with its
  reason and, if it drives its request's current step (:mod:`tasks.messages`),
  the request is finished: a booked one with its recorded ``scheduled``
  result, any other with a terminal ``rejected`` result
  (``error.code = dead_lettered``) — instead of looping;
* Redis/broker connection errors requeue the message after a short backoff
  (the state it had written is idempotent, the retry resumes), also when
  they happen inside the guard itself;
* any other exception is retried ``max_task_errors`` times, then dead-lettered.

Steps hand each other a small JSON dict; a step with nothing left to do
raises :class:`celery.exceptions.Ignore`, which acknowledges the message and
stops the chain. ``decide`` normally finishes the request itself (booked and
published, or parked, in one round trip) and drops the rest of its chain.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from typing import Any, NoReturn

import redis
from celery import Task, signals  # type: ignore[import-untyped]
from celery.exceptions import Ignore, Reject  # type: ignore[import-untyped]
from kombu.exceptions import OperationalError

from scheduler_core import ErrorOut, ScheduleResult
from tasks import pipeline, reschedule
from tasks.app import app, commit_chain, dispatch_decision, dispatch_publish
from tasks.drainer import Drainer, drain_once
from tasks.logging import get_logger
from tasks.messages import (
    CLUSTER_EVENT,
    DECIDE,
    DRAIN_DELAYED,
    PUBLISH,
    RESERVE,
    MessageRequest,
    message_request,
)
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


#: Delivery counters this process could not clear (Redis was unreachable); cleared
#: before its next task, so a requeue after a Redis outage is not counted as a crash.
_UNCLEARED: set[str] = set()


class GuardedTask(Task):  # type: ignore[misc]
    """Base task with the redelivery guard (see the module docstring)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.request.called_directly or not self.request.id:
            return self.run(*args, **kwargs)
        rt = runtime()
        task_id = str(self.request.id)
        crashes = 0
        try:
            _clear_uncleared(rt)
            crashes = rt.store.count_delivery(task_id)
            if crashes > rt.settings.max_crashes:
                self._dead_letter(rt, args, kwargs, "worker_lost_repeatedly",
                                  f"{crashes - 1} deliveries died before finishing", crashes)
        except TRANSIENT_ERRORS as error:
            self._requeue(rt, task_id, error, counted=crashes > 0)
        try:
            outcome = self.run(*args, **kwargs)
        except (Ignore, Reject):
            self._finished(rt, task_id)
            raise
        except TRANSIENT_ERRORS as error:
            self._requeue(rt, task_id, error)
        except Exception as error:
            self._failed(rt, args, kwargs, task_id, error)
        self._finished(rt, task_id)
        return outcome

    def _finished(self, rt: Runtime, task_id: str) -> None:
        try:
            rt.store.clear_delivery(task_id)
        except TRANSIENT_ERRORS:
            _UNCLEARED.add(task_id)
            log.warning("delivery_count_not_cleared", task_id=task_id)

    def _requeue(
        self, rt: Runtime, task_id: str, error: BaseException, *, counted: bool = True
    ) -> NoReturn:
        """Put the message back after a Redis/broker error: not a crash, not a task error.

        ``counted``: this delivery's start was counted (and must be uncounted).
        """
        log.warning("transient_error_requeue", error=repr(error))
        time.sleep(rt.settings.transient_backoff_s)
        if counted:
            self._finished(rt, task_id)
        raise Reject(error, requeue=True)

    def _failed(
        self, rt: Runtime, args: tuple[Any, ...], kwargs: Mapping[str, Any], task_id: str,
        error: Exception,
    ) -> NoReturn:
        try:
            errors = rt.store.count_error(task_id)
            log.error("task_error", error=repr(error), errors=errors, exc_info=error)
            if errors < rt.settings.max_task_errors:
                rt.store.clear_delivery(task_id)
                time.sleep(rt.settings.transient_backoff_s)
                raise Reject(error, requeue=True)
            rt.store.clear_errors(task_id)
            self._dead_letter(rt, args, kwargs, "task_error", f"{type(error).__name__}: {error}",
                              errors)
        except TRANSIENT_ERRORS as transient:
            self._requeue(rt, task_id, transient)

    def _dead_letter(
        self, rt: Runtime, args: tuple[Any, ...], kwargs: Mapping[str, Any], reason: str,
        detail: str, count: int,
    ) -> NoReturn:
        """Dead-letter this message; finish its request if the message drives it (no validation)."""
        driven = message_request(self.name, args, kwargs) or MessageRequest("")
        rejection = ScheduleResult(
            request_id=driven.request_id or "-",
            status="rejected",
            error=ErrorOut(
                code="dead_lettered",
                message=f"gave up on {self.name} after {count} deliveries: {detail}",
                field=None,
            ),
        ).model_dump_json()
        task_id = str(self.request.id)
        raw = driven.raw is not None
        _, result_id = rt.store.dead_letter(
            request_id=driven.request_id, task_name=self.name, task_id=task_id,
            reason=reason, detail=detail, deliveries=count,
            args_json=json.dumps(list(args), default=str), rejected_json=rejection,
            seq=driven.seq, attempt=driven.attempt, result_digest=driven.result_digest,
            intake_task=task_id if raw else "",
            request_json=json.dumps(driven.raw, sort_keys=True, default=str) if raw else "",
        )
        rt.store.clear_delivery(task_id)
        log.error("dead_lettered", reason=reason, detail=detail, request_id=driven.request_id,
                  result_id=result_id)
        raise Ignore()


def _clear_uncleared(rt: Runtime) -> None:
    for task_id in list(_UNCLEARED):
        rt.store.clear_delivery(task_id)
        _UNCLEARED.discard(task_id)


def _continue(step: pipeline.Step | None) -> dict[str, Any]:
    if step is None:
        raise Ignore()
    return step.to_dict()


@app.task(name=DECIDE, base=GuardedTask, bind=True)  # type: ignore[untyped-decorator]
def decide(self: GuardedTask, request: Any, seq: int = 0, attempt: int = 0) -> Any:
    """Decide a placement for a request id (or a raw Contract 1 request), book and publish it.

    The decision, its booking and its publish (or park) step go to Redis in one
    round trip (:func:`tasks.pipeline.decide_and_finish`), so the chain's
    ``gpusched.reserve`` and ``gpusched.publish`` hops are dropped. When a step
    is left (this attempt's decision was recorded first by another delivery)
    the chain continues with it; a bare ``gpusched.decide`` message (no chain
    attached, e.g. from a foreign Celery client) then continues with the
    default reserve → publish steps.
    """
    progress = pipeline.decide_and_finish(runtime(), request, seq, attempt, str(self.request.id))
    remaining = self.request.chain
    if progress.step is None:
        if progress.outcome is None:
            raise Ignore()
        if remaining:
            remaining.clear()  # finished here: no reserve/publish hop
        log.info("request_finished", outcome=progress.outcome)
        return progress.outcome
    step = progress.step.to_dict()
    if not remaining and not self.request.callbacks:
        commit_chain(step).apply_async()
    elif step["action"] != "reserve" and remaining and remaining[-1].get("task") == RESERVE:
        remaining.pop()  # booked already (or nothing to book): skip the no-op hop
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
