"""The middleware seam: one concern per class, hooks around each task and around the worker's life.

Modelled on dramatiq's middleware: a worker runs every task message through
the stack (:func:`run_task`), outermost first, and calls the boot and
shutdown hooks of every middleware in stack order. A middleware overrides
only the hooks it needs; the others pass through.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tasks.state.context import Runtime

#: Runs the rest of the stack (and then the task) for one delivery; returns the task's value.
Proceed = Callable[[], Any]
#: This thread's runtime (built on first use; see :func:`tasks.state.context.get_runtime`).
RuntimeFactory = Callable[[], Runtime]


@dataclass(slots=True)
class Delivery:
    """One delivery of a task message, as the middleware see it.

    Attributes:
        task_name: the task's registered name (``gpusched.decide``, ...).
        task_id: the message id (stable across redeliveries).
        args, kwargs: the message's arguments.
        rt: the runtime the task runs with.
        counted: this delivery's start was counted by the redelivery guard
            (whoever requeues it must uncount it).
        started: ``time.monotonic()`` when the delivery started (the time limits run from it).
        queue: the queue the message was taken from (None when run in process).
        start: this delivery's own id (the redelivery guard counts each start once).
    """

    task_name: str
    task_id: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    rt: Runtime
    counted: bool = False
    started: float = field(default_factory=time.monotonic)
    queue: str | None = None
    start: str = field(default_factory=lambda: uuid.uuid4().hex)


class Middleware:
    """Base class: every hook passes through."""

    def around_task(self, delivery: Delivery, proceed: Proceed) -> Any:
        """Wrap one task delivery; must call ``proceed()`` to run the task (or raise instead)."""
        return proceed()

    def after_worker_boot(self, node: str, runtime: RuntimeFactory) -> None:
        """The worker node is ready to consume (Celery ``worker_ready``)."""

    def before_worker_shutdown(self, node: str, runtime: RuntimeFactory) -> None:
        """The worker node is shutting down (Celery ``worker_shutting_down``)."""


def run_task(stack: Sequence[Middleware], delivery: Delivery, task: Proceed) -> Any:
    """Run ``task`` for ``delivery`` through ``stack`` (first = outermost)."""
    proceed = task
    for middleware in reversed(stack):
        proceed = _bound(middleware, delivery, proceed)
    return proceed()


def _bound(middleware: Middleware, delivery: Delivery, proceed: Proceed) -> Proceed:
    return lambda: middleware.around_task(delivery, proceed)
