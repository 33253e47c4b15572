"""The task messages of the wire contract: task names, and which request a message drives.

One rule, used by the redelivery guard (:mod:`tasks.worker_tasks`: which
request a dead-lettered message may finish) and by log binding
(:mod:`tasks.app`: the ``request_id`` bound for a task):

* ``gpusched.decide(request_id, seq=0, attempt=0)`` drives that decision
  attempt;
* ``gpusched.decide(raw_request)`` (any Celery-protocol client) drives the
  request it accepts, at seq 0, attempt 0, under the edge's id rule
  (:func:`tasks.edge.request_id_of`: the given id, else a content digest);
* ``gpusched.reserve(step)`` / ``gpusched.publish(step)`` drive the step's
  attempt of the decision named by its result digest; a malformed step drives
  nothing;
* ``gpusched.cluster_event`` and ``gpusched.drain_delayed`` concern no request.

Only the shape of the arguments is inspected (no validation of the request
itself), so a message whose validation is what kills a worker can still be
dead-lettered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tasks.edge import request_id_of
from tasks.pipeline import Step

#: Task names (the wire contract with control planes and between steps).
DECIDE = "gpusched.decide"
RESERVE = "gpusched.reserve"
PUBLISH = "gpusched.publish"
CLUSTER_EVENT = "gpusched.cluster_event"
DRAIN_DELAYED = "gpusched.drain_delayed"


@dataclass(frozen=True, slots=True)
class MessageRequest:
    """The request step a task message drives.

    Attributes:
        request_id: the request.
        seq, attempt: the decision attempt.
        result_digest: the decision a reserve/publish step comes from ("" for decide).
        raw: the raw request of an intake message (``gpusched.decide(dict)``), else None.
    """

    request_id: str
    seq: int = 0
    attempt: int = 0
    result_digest: str = ""
    raw: Mapping[str, Any] | None = None


def message_request(
    task_name: str | None, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None
) -> MessageRequest | None:
    """The request step the message of task ``task_name`` drives (None: no request)."""
    kwargs = kwargs or {}
    first = args[0] if args else kwargs.get("request", kwargs.get("step"))
    if task_name == DECIDE:
        return _decide_request(first, args, kwargs)
    if task_name in (RESERVE, PUBLISH) and isinstance(first, Mapping):
        try:
            step = Step.from_dict(first)
        except (TypeError, ValueError):
            return None
        return MessageRequest(step.request_id, step.seq, step.attempt, step.result_digest)
    return None


def _decide_request(
    first: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> MessageRequest | None:
    if isinstance(first, Mapping):
        return MessageRequest(request_id_of(first), raw=first)
    if not isinstance(first, str):
        return None
    seq = args[1] if len(args) > 1 else kwargs.get("seq", 0)
    attempt = args[2] if len(args) > 2 else kwargs.get("attempt", 0)
    if not isinstance(seq, int) or not isinstance(attempt, int):
        return None
    return MessageRequest(first, seq, attempt)
