"""The Celery tasks on the wire: their names, and which request a task message drives.

Four tasks (names are the wire contract with control planes and workers):

* ``gpusched.decide(request_id, seq=0, attempt=0)`` decides, books and
  publishes (or parks) one decision attempt in one message;
  ``gpusched.decide(raw_request)`` (any Celery-protocol client) first accepts
  the request, under the intake's id rule
  (:func:`tasks.intake.requests.request_id_of`), at seq 0, attempt 0;
* ``gpusched.decide_batch(items)`` decides many recorded requests in one
  message, each item ``[request_id, seq, attempt]`` as ``gpusched.decide``
  takes them (at most :data:`MAX_BATCH_REQUESTS` items; :mod:`tasks.decision.batch`);
* ``gpusched.resume(step)`` finishes a leftover :class:`~tasks.base.step.Step`
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

from tasks.base.step import Step
from tasks.base.task_names import CLUSTER_EVENT, DECIDE, DECIDE_BATCH, DRAIN_DELAYED, RESUME
from tasks.intake.limits import InvalidField
from tasks.intake.names import REQUEST_ID, check_name
from tasks.intake.requests import request_id_of

#: The task names (the wire contract) live in the base room; re-exported here.
__all__ = ["CLUSTER_EVENT", "DECIDE", "DECIDE_BATCH", "DRAIN_DELAYED", "RESUME"]

#: Most items one ``gpusched.decide_batch`` message may carry (its size bound on the wire: an
#: item is at most a 200-character id and two integers, so a batch stays far below
#: ``max_message_bytes``). A control plane's deploy (tens of replicas) or the service's own
#: storms fit a few messages; a bigger batch would hold the decide lease past a second.
MAX_BATCH_REQUESTS = 200


#: Each task's parameters in order, and how many are required (the tasks' signatures as data).
PARAMETERS: dict[str, tuple[tuple[str, ...], int]] = {
    DECIDE: (("request", "seq", "attempt"), 1),
    DECIDE_BATCH: (("items",), 1),
    RESUME: (("step",), 1),
    CLUSTER_EVENT: (("event",), 1),
    DRAIN_DELAYED: ((), 0),
}


def argument_problem(task_name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
    """What is wrong with a message's arguments for its task, None if the task can take them.

    The binding Python would do (too many positional arguments, an unexpected or a
    repeated keyword, a missing argument) and the wire types: ``decide``'s request is a
    request id (its alphabet, :data:`tasks.intake.names.REQUEST_ID`) or a raw request
    (an object, validated by the intake), ``seq`` and ``attempt`` integers ≥ 0;
    ``resume``'s step a :class:`~tasks.base.step.Step`. A message this refuses is the
    message's fault, never its request's: it is dead-lettered alone.
    """
    names, required = PARAMETERS.get(task_name, ((), 0))
    bound, problem = _bound(names, required, args, kwargs)
    if problem is not None:
        return problem
    if task_name == DECIDE:
        return _decide_problem(bound)
    if task_name == DECIDE_BATCH:
        return _batch_problem(bound["items"])
    if task_name == RESUME:
        return _step_problem(bound["step"])
    return None


def _bound(
    names: tuple[str, ...], required: int, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[dict[str, Any], str | None]:
    if len(args) > len(names):
        return {}, f"takes at most {len(names)} positional arguments, got {len(args)}"
    bound = dict(zip(names, args, strict=False))
    for key, value in kwargs.items():
        if key not in names:
            return {}, f"unexpected keyword argument {key!r}"
        if key in bound:
            return {}, f"argument {key!r} given twice"
        bound[key] = value
    missing = [name for name in names[:required] if name not in bound]
    return bound, f"missing argument {missing[0]!r}" if missing else None


def _decide_problem(bound: Mapping[str, Any], *, ids_only: bool = False) -> str | None:
    request = bound["request"]
    if ids_only and not isinstance(request, str):
        return f"request must be a request id, not {type(request).__name__}"
    if not isinstance(request, str | Mapping):
        return f"request must be a request id or a request object, not {type(request).__name__}"
    if isinstance(request, str):
        try:
            check_name(request, REQUEST_ID, "request")
        except InvalidField as error:
            return str(error)
    for name in ("seq", "attempt"):
        value = bound.get(name, 0)
        if type(value) is not int or value < 0:
            return f"{name} must be an integer of 0 or more"
    return None


def _batch_problem(items: Any) -> str | None:
    """The container of a batch: a list of 1 to :data:`MAX_BATCH_REQUESTS` items.

    A malformed item is not the batch's fault: :func:`batch_items` drops it alone.
    """
    if not isinstance(items, list):
        return f"items must be a list, not {type(items).__name__}"
    if not 1 <= len(items) <= MAX_BATCH_REQUESTS:
        return f"items must hold 1 to {MAX_BATCH_REQUESTS} requests, not {len(items)}"
    return None


def item_problem(item: Any) -> str | None:
    """What is wrong with one batch item (``[request_id, seq, attempt]``), None if nothing."""
    if not isinstance(item, list | tuple) or len(item) != 3:
        return "an item must be [request_id, seq, attempt]"
    return _decide_problem({"request": item[0], "seq": item[1], "attempt": item[2]}, ids_only=True)


def _step_problem(step: Any) -> str | None:
    if not isinstance(step, Mapping):
        return f"step must be an object, not {type(step).__name__}"
    try:
        Step.from_dict(step)
    except (TypeError, ValueError) as error:
        return f"step is not a decision step: {type(error).__name__}"
    return None


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


def driven_requests(
    task_name: str | None, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None
) -> list[DrivenRequest]:
    """Every request step a message drives: one per well-formed item of a batch, else
    :func:`driven_request`'s (none when it names none)."""
    if task_name != DECIDE_BATCH:
        driven = driven_request(task_name, args, kwargs)
        return [driven] if driven is not None else []
    items = args[0] if args else (kwargs or {}).get("items")
    return [DrivenRequest(*item) for item in batch_items(items)[0]]


def batch_items(items: Any) -> tuple[list[tuple[str, int, int]], list[tuple[int, str]]]:
    """A batch's well-formed items, each request once (its first item), and the others.

    Returns:
        ``([(request_id, seq, attempt), ...], [(position, problem), ...])``: an item
        naming a request an earlier item names is dropped too (one decision per
        request and message).
    """
    kept: list[tuple[str, int, int]] = []
    dropped: list[tuple[int, str]] = []
    seen: set[str] = set()
    for position, item in enumerate(items if isinstance(items, list) else ()):
        problem = item_problem(item)
        if problem is None and item[0] in seen:
            problem = f"request {item[0]!r} is named by an earlier item"
        if problem is not None:
            dropped.append((position, problem))
            continue
        seen.add(item[0])
        kept.append((item[0], item[1], item[2]))
    return kept, dropped


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
