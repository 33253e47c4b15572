"""structlog for the service: JSON in production, console on a TTY, ``request_id`` everywhere.

One processor chain serves structlog loggers and stdlib records (Celery's own
log lines go through :class:`structlog.stdlib.ProcessorFormatter`), so every
line carries the context bound for the current task. ``request_id`` travels
with a message as a Celery header (``before_task_publish``) and is bound in
the worker (``task_prerun``); contextvars are cleared before and after each
task because pool processes are reused.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog
from structlog.typing import Processor

from scheduler_core import render_value


def render_fields(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> dict[str, Any]:
    """A processor: every text of the line passes :func:`scheduler_core.render_text`, so a
    value quoting input (a field name, a message, an argument) never stops a log line."""
    return {key: render_value(value) for key, value in event.items()}


_SHARED: list[Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    structlog.processors.StackInfoRenderer(),
    render_fields,
]


def _use_json(log_format: str) -> bool:
    if log_format == "json":
        return True
    if log_format == "console":
        return False
    return not sys.stderr.isatty()


def configure_logging(log_format: str = "auto", level: str = "INFO") -> None:
    """Route structlog and stdlib logging through one formatter on stderr.

    Args:
        log_format: ``json``, ``console`` or ``auto`` (JSON unless stderr is a TTY).
        level: root log level name.
    """
    as_json = _use_json(log_format)
    renderer: Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    tail: list[Processor] = [structlog.stdlib.ProcessorFormatter.remove_processors_meta]
    if as_json:
        # dict tracebacks without frame locals: locals may hold request payloads
        transformer = structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
        tail.append(structlog.processors.ExceptionRenderer(transformer))
    tail.append(renderer)
    structlog.configure(
        processors=[*_SHARED, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(foreign_pre_chain=_SHARED, processors=tail)
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def get_logger(name: str) -> Any:
    """A structlog logger bound to ``name``."""
    return structlog.stdlib.get_logger(name)


def current_request_id() -> str | None:
    """The ``request_id`` bound in this context, if any."""
    value = structlog.contextvars.get_contextvars().get("request_id")
    return value if isinstance(value, str) else None


def bind_task(task_id: str | None, task_name: str | None, request_id: str | None) -> None:
    """Start a task's logging context (clears what the previous task bound)."""
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(task_id=task_id, task_name=task_name)
    if request_id:
        structlog.contextvars.bind_contextvars(request_id=request_id)


def clear() -> None:
    """Forget every contextvar binding."""
    structlog.contextvars.clear_contextvars()
