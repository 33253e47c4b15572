"""The Celery tasks, as thin as possible: each calls one stage function.

* ``gpusched.decide`` → :func:`tasks.decision.decide.decide_and_finish`: the
  whole decision in one message (record, book, publish or park). A step is
  left over only when another delivery recorded this attempt's decision
  first; it is sent on as one ``gpusched.resume`` message.
* ``gpusched.decide_batch`` → :func:`tasks.decision.batch.decide_batch`: many
  recorded requests under one lease hold, committed in one pipeline (malformed
  items dead-lettered alone); leftover steps go on as ``gpusched.resume``.
* ``gpusched.resume`` → :func:`tasks.decision.decide.resume`: finish a
  leftover step (also what the watchdog sends for a booked request whose
  publish was lost).
* ``gpusched.cluster_event`` → :func:`tasks.flows.cluster_changes.handle_cluster_event`.
* ``gpusched.drain_delayed`` → :func:`tasks.runtime.drainer.drain_once`.

Every delivery runs through the middleware stack
(:data:`tasks.runtime.middleware.TASK_STACK`); a task with nothing left to do
raises :class:`celery.exceptions.Ignore`, which acknowledges the message.
"""

from __future__ import annotations

import time
from typing import Any

from celery import Task  # type: ignore[import-untyped]
from celery.exceptions import Ignore  # type: ignore[import-untyped]

from tasks.base.logging import get_logger
from tasks.base.step import Step
from tasks.decision import batch as batches
from tasks.decision import decide as decision
from tasks.flows import metrics
from tasks.flows.cluster_changes import handle_cluster_event
from tasks.runtime.celery_app import app, worker_runtime
from tasks.runtime.drainer import drain_once
from tasks.runtime.middleware import TASK_STACK, Delivery, run_task
from tasks.runtime.task_contract import (
    CLUSTER_EVENT,
    DECIDE,
    DECIDE_BATCH,
    DRAIN_DELAYED,
    RESUME,
    batch_items,
)
from tasks.state.context import Runtime

log = get_logger(__name__)


def runtime() -> Runtime:
    """This thread's runtime (the seam the tests replace with a fakeredis one)."""
    return worker_runtime()


class MiddlewareTask(Task):  # type: ignore[misc]
    """Base task: each delivery runs through :data:`~tasks.runtime.middleware.TASK_STACK`."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.request.called_directly or not self.request.id:
            return self.run(*args, **kwargs)
        queue = (self.request.delivery_info or {}).get("routing_key")
        delivery = Delivery(self.name, str(self.request.id), args, kwargs, runtime(), queue=queue)
        return run_task(TASK_STACK, delivery, lambda: self.run(*args, **kwargs))


@app.task(name=DECIDE, base=MiddlewareTask, bind=True)  # type: ignore[untyped-decorator]
def decide(self: MiddlewareTask, request: Any, seq: int = 0, attempt: int = 0) -> str:
    """Decide a placement for a request id (or a raw Contract 1 request), book and publish it."""
    rt = runtime()
    started = time.perf_counter()
    progress = decision.decide_and_finish(rt, request, seq, attempt, str(self.request.id))
    metrics.observe_decision(time.perf_counter() - started)
    if progress.outcome == "published" and progress.created_ms:
        metrics.observe_submit_to_result((rt.partition.now_ms() - progress.created_ms) / 1000)
    if progress.step is not None:
        rt.resume(progress.step.to_dict())
        return "resumed"
    if progress.outcome is None:
        raise Ignore()
    log.info("request_finished", outcome=progress.outcome)
    return progress.outcome


@app.task(name=DECIDE_BATCH, base=MiddlewareTask, bind=True)  # type: ignore[untyped-decorator]
def decide_batch(self: MiddlewareTask, items: list[Any]) -> dict[str, int]:
    """Decide, book and publish (or park) every request of a batch (see :mod:`tasks.decision.batch`)."""
    rt = runtime()
    task_id = str(self.request.id)
    kept, dropped = batch_items(items)
    batches.refuse_items(rt, task_id, dropped)
    started = time.perf_counter()
    progress = batches.decide_batch(rt, kept, task_id)
    elapsed = time.perf_counter() - started
    for _ in range(progress.decided):  # each request's share of the message
        metrics.observe_decision(elapsed / progress.decided)
    now_ms = rt.partition.now_ms()
    for request_id, outcome in progress.outcomes.items():
        if outcome == "published" and progress.created_ms.get(request_id):
            metrics.observe_submit_to_result((now_ms - progress.created_ms[request_id]) / 1000)
    for step in progress.leftover:
        rt.resume(step.to_dict())
    log.info("batch_finished", **progress.summary(), **progress.timings())
    return progress.summary()


@app.task(name=RESUME, base=MiddlewareTask, bind=True)  # type: ignore[untyped-decorator]
def resume(self: MiddlewareTask, step: dict[str, Any]) -> str:
    """Finish a leftover step: book it if needed, then publish or park."""
    outcome = decision.resume(runtime(), Step.from_dict(step))
    if outcome is None:
        raise Ignore()
    log.info("request_finished", outcome=outcome, request_id=step.get("request_id"))
    return outcome


@app.task(name=CLUSTER_EVENT, base=MiddlewareTask, bind=True)  # type: ignore[untyped-decorator]
def cluster_event(self: MiddlewareTask, event: Any) -> dict[str, Any]:
    """Apply one cluster event (see :mod:`tasks.flows.cluster_changes`)."""
    summary = handle_cluster_event(runtime(), event)
    log.info("cluster_event", summary=summary)
    return summary


@app.task(name=DRAIN_DELAYED, base=MiddlewareTask, bind=True)  # type: ignore[untyped-decorator]
def drain_delayed(self: MiddlewareTask) -> dict[str, int]:
    """Enqueue due outbox entries and fire due timers (workers also do this on their own)."""
    return drain_once(runtime())
