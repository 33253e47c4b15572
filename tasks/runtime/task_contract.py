"""The Celery tasks on the wire: their names, and which request a task message drives.

Four tasks (names are the wire contract with control planes and workers):

* ``gpusched.decide(request_id, seq=0, attempt=0)`` decides, books and
  publishes (or parks) one decision attempt in one message;
  ``gpusched.decide(raw_request)`` (any Celery-protocol client) first accepts
  the request, under the intake's id rule
  (:func:`tasks.intake.requests.request_id_of`), at seq 0, attempt 0;
* ``gpusched.resume(step)`` finishes a leftover :class:`~tasks.decision.step.Step`
  (a decision another delivery recorded first, or a booked request whose
  publish was lost): book it if needed, then publish or park;
* ``gpusched.cluster_event(event)`` applies one cluster event;
* ``gpusched.drain_delayed()`` runs one drainer pass on demand.

:func:`driven_request` is the one rule for "which request step does this
message drive", used by the redelivery guard (which request a dead-lettered
message may finish) and by log binding (the ``request_id`` of a task). Only
the shape of the arguments is inspected (no validation of the request
itself), so a message whose validation is what kills a worker can still be
dead-lettered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tasks.decision.step import Step
from tasks.intake.requests import request_id_of

#: Task names (the wire contract).
DECIDE = "gpusched.decide"
RESUME = "gpusched.resume"
CLUSTER_EVENT = "gpusched.cluster_event"
DRAIN_DELAYED = "gpusched.drain_delayed"


@dataclass(frozen=True, slots=True)
class DrivenRequest:
    """The request step a task message drives.

    Attributes:
        request_id: the request.
        seq, attempt: the decision attempt.
        result_digest: the decision a resume step comes from ("" for decide).
        raw: the raw request of an intake message (``gpusched.decide(dict)``), else None.
    """

    request_id: str
    seq: int = 0
    attempt: int = 0
    result_digest: str = ""
    raw: Mapping[str, Any] | None = None


def driven_request(
    task_name: str | None, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None
) -> DrivenRequest | None:
    """The request step the message of task ``task_name`` drives (None: no request)."""
    kwargs = kwargs or {}
    first = args[0] if args else kwargs.get("request", kwargs.get("step"))
    if task_name == DECIDE:
        return _decide_request(first, args, kwargs)
    if task_name == RESUME and isinstance(first, Mapping):
        try:
            step = Step.from_dict(first)
        except (TypeError, ValueError):
            return None
        return DrivenRequest(step.request_id, step.seq, step.attempt, step.result_digest)
    return None


def _decide_request(
    first: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> DrivenRequest | None:
    if isinstance(first, Mapping):
        return DrivenRequest(request_id_of(first), raw=first)
    if not isinstance(first, str):
        return None
    seq = args[1] if len(args) > 1 else kwargs.get("seq", 0)
    attempt = args[2] if len(args) > 2 else kwargs.get("attempt", 0)
    if not isinstance(seq, int) or not isinstance(attempt, int):
        return None
    return DrivenRequest(first, seq, attempt)
