"""Delivering Celery task messages in process, as a worker's pool process runs them.

The task runs with a pushed request context (an id, not called directly), so
the whole middleware stack runs around it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def deliver(task: Any, task_id: str, *args: Any) -> Any:
    """One delivery of a message of ``task`` with id ``task_id``."""
    task.push_request(id=task_id, called_directly=False, chain=None, callbacks=None)
    try:
        return task(*args)
    finally:
        task.pop_request()


def raising(error: BaseException) -> Callable[..., Any]:
    """A stand-in that raises ``error`` whatever it is called with."""

    def fail(*_: Any, **__: Any) -> Any:
        raise error

    return fail
