"""Every log line carries the ``request_id`` of the request being worked on.

The id travels with a message as a Celery header (set when the message is
published) and is bound, with the task's id and name, when a worker starts
the task; contextvars are cleared before and after each task because pool
processes are reused. The bound id is the one the message drives
(:func:`tasks.runtime.task_contract.driven_request`), else the header's.
"""

from __future__ import annotations

from typing import Any

from tasks.base import logging as service_logging
from tasks.runtime.task_contract import driven_request


def add_request_header(headers: dict[str, Any] | None) -> None:
    """Stamp an outgoing message with the ``request_id`` bound in this context (if any)."""
    request_id = service_logging.current_request_id()
    if headers is not None and request_id and "request_id" not in headers:
        headers["request_id"] = request_id


def bind_task(task_id: str | None, task: Any, args: Any, kwargs: Any) -> None:
    """Start a task's logging context: its id, name and the request it drives."""
    name = getattr(task, "name", None)
    driven = driven_request(name, args if isinstance(args, list | tuple) else (), kwargs)
    request_id = driven.request_id if driven else getattr(getattr(task, "request", None), "request_id", None)
    service_logging.bind_task(task_id, name, request_id)


def unbind_task() -> None:
    """Forget the finished task's logging context."""
    service_logging.clear()
