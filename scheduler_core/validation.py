"""The one request validator: the field-naming rule, the first problem of a document, parsing.

Every door that takes a scheduling request — ``schedule()``, the service's
intake, the broker door that refuses a message too deep to parse — names a
field the same way and refuses a depth or a string the same way:

* :func:`dotted_field` names a value by its full path (``model.backend_parameters.3``),
  each key rendered (:func:`~scheduler_core.limits.render_text`), an empty key as
  :data:`EMPTY_KEY`;
* :func:`request_field` names a value nested too deeply by the request field that holds
  it: the top-level field, or the model's field (``model.env``) — a path past 64
  levels says nothing more;
* :func:`first_problem` is the first value (document order) nested too deeply or
  holding invalid Unicode, named by those rules; bounded: it stops at the first,
  and never descends below the limit;
* :func:`parse_request` is the core's whole check: its depth rule, then the schema,
  raising one :class:`~scheduler_core.errors.RequestError` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from scheduler_core._schemas import ScheduleRequest
from scheduler_core.errors import RequestError
from scheduler_core.limits import MAX_DEPTH, TOO_DEEP, problems, render_text, too_deep

#: How a field path names an empty key (``{"": ...}``): a path part that is not blank.
EMPTY_KEY = '""'
#: Request fields typed all the way down: pydantic names the field of anything deep in them.
_TYPED_CLUSTER_FIELDS = frozenset({"workers", "model_instances"})
#: ``error.code`` of a request that does not validate.
INVALID_REQUEST = "invalid_request"


def _part(part: object) -> str:
    return render_text(str(part)) or EMPTY_KEY


def dotted_field(path: Sequence[object], root: str = "") -> str:
    """A value's full path as a field name (``model.lora_list.0.local_path``), under ``root``."""
    return ".".join([root, *map(_part, path)] if root else map(_part, path))


def request_field(path: Sequence[object]) -> str:
    """The request field holding the value at ``path``: the top-level field, or the model's
    field (``model.hf_config``); ``request`` for the request itself."""
    if not path:
        return "request"
    if path[0] == "model" and len(path) > 1 and isinstance(path[1], str):
        return dotted_field(path[:2])
    return dotted_field(path[:1])


@dataclass(frozen=True, slots=True)
class Problem:
    """What is wrong with a document, and where (``field`` per the rules above)."""

    field: str
    message: str


def first_problem(
    value: Any, limit: int = MAX_DEPTH, *, unicode: bool = True, root: str = "", request: bool = False
) -> Problem | None:
    """The first value of ``value`` (document order) nested more than ``limit`` levels or
    holding invalid Unicode, or None.

    Args:
        value: a JSON-shaped document (a request, a snapshot, an event).
        limit: levels of containers allowed, the root's included.
        unicode: check strings and keys too.
        root: the name of ``value`` itself when it is part of something larger.
        request: ``value`` is a request: a value nested too deeply is named by its request
            field (:func:`request_field`); otherwise every problem by its full path.
    """
    for path, message in problems(value, limit, unicode=unicode):
        deep = message.startswith("nests")
        field = request_field(path) if request and deep else dotted_field(path, root)
        return Problem(field or "document", message)
    return None


def deep_field(raw: Mapping[str, Any]) -> str | None:
    """The field of a request that nests more than :data:`MAX_DEPTH` levels, or None (the
    core's depth rule: each field's value may nest that deep).

    ``model.hf_config`` is left to :func:`~scheduler_core.model_config.model_parameters_from_config`,
    which refuses it with GPUStack's message; ``workers`` and ``model_instances`` are
    typed, so validation names the field of anything deep in them. Iterative: any depth.
    """
    for key, value in raw.items():
        if key in _TYPED_CLUSTER_FIELDS:
            continue
        if key == "model" and isinstance(value, Mapping):
            deep = (name for name, item in value.items() if name != "hf_config" and too_deep(item))
            inner = next(deep, None)
            if inner is not None:
                return request_field(("model", inner))
        elif too_deep(value):
            return request_field((key,))
    return None


def parse_request(raw: Any) -> ScheduleRequest:
    """The request, validated: the core's depth rule, then the schema.

    Raises:
        RequestError: naming the field (``invalid_request``): a field nested too deeply,
            or the schema's first error and its location.
    """
    if isinstance(raw, ScheduleRequest):
        return raw
    deep = deep_field(raw) if isinstance(raw, Mapping) else None
    if deep is not None:
        raise RequestError(deep, TOO_DEEP, INVALID_REQUEST)
    try:
        return ScheduleRequest.model_validate(raw)
    except ValidationError as error:
        raise schema_error(error) from None


def schema_error(error: ValidationError) -> RequestError:
    """Pydantic's first error as a :class:`RequestError` at its location."""
    first = error.errors(include_url=False)[0]
    field = ".".join(str(part) for part in first["loc"]) or "request"
    message = str(first["msg"]).removeprefix("Value error, ")
    return RequestError(field, message, INVALID_REQUEST)
