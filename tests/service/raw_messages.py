"""Raw broker messages for the door tests: what a foreign or hostile client can push on a queue.

:func:`envelope` builds the JSON envelope kombu's Redis transport stores in a
list (Celery protocol 2: headers, base64 body ``[args, kwargs, embed]``), the
same shape a ``send_task`` produces; its keyword arguments break one part at
a time. Tests ``LPUSH`` the bytes on a queue (kombu pops from the right).
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def nested(depth: int, leaf: Any = 0) -> Any:
    """A JSON value of ``depth`` nested lists around ``leaf`` (built iteratively)."""
    value: Any = leaf
    for _ in range(depth):
        value = [value]
    return value


def nested_text(depth: int) -> str:
    """``[[[...0...]]]`` with ``depth`` levels, as JSON text (no recursion needed)."""
    return "[" * depth + "0" + "]" * depth


def envelope(
    task: str = "gpusched.decide",
    args: list[Any] | None = None,
    *,
    body_text: str | None = None,
    body: str | None = None,
    content_type: str = "application/json",
    headers: dict[str, Any] | None = None,
    drop_headers: bool = False,
    queue: str = "gpusched.requests",
) -> bytes:
    """A kombu/Celery message envelope as kombu stores it in a Redis list.

    Args:
        task, args: the task name and positional arguments.
        body_text: the body's JSON text instead of ``[args, {}, embed]``.
        body: the ``body`` field verbatim (e.g. not base64).
        content_type: the envelope's ``content-type``.
        headers: header fields to override (e.g. ``eta``).
        drop_headers: send no headers at all (not a protocol 2 task message).
        queue: the routing key recorded in ``delivery_info``.
    """
    task_id = str(uuid.uuid4())
    text = body_text if body_text is not None else json.dumps([args or [], {}, EMBED])
    encoded = body if body is not None else base64.b64encode(text.encode("utf-8", "surrogatepass")).decode()
    message_headers: dict[str, Any] = {
        "lang": "py", "task": task, "id": task_id, "shadow": None, "eta": None, "expires": None,
        "group": None, "group_index": None, "retries": 0, "timelimit": [None, None],
        "root_id": task_id, "parent_id": None, "argsrepr": "", "kwargsrepr": "{}",
        "origin": "test@raw", "ignore_result": None, "replaced_task_nesting": 0,
        "stamped_headers": None, "stamps": {},
        **(headers or {}),
    }
    document: dict[str, Any] = {
        "body": encoded,
        "content-encoding": "utf-8",
        "content-type": content_type,
        "headers": {} if drop_headers else message_headers,
        "properties": {
            "correlation_id": task_id, "reply_to": str(uuid.uuid4()), "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue}, "priority": 0,
            "body_encoding": "base64", "delivery_tag": str(uuid.uuid4()),
        },
    }
    return json.dumps(document).encode()
