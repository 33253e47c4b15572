"""One request validator (issue 21, item 4): one nesting checker, one field rule, every door.

The core's ``parse_request`` / ``first_problem``, the service's intake and the broker door's
reading of a message too deep to parse name the same field for the same deep request, and
refuse it with the same text.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
from builders import model

from scheduler_core import (
    EMPTY_KEY,
    RequestError,
    dotted_field,
    first_problem,
    parse_request,
    request_field,
    schedule,
)
from tasks.intake.broker_messages import deep_request
from tasks.intake.requests import normalize

DEPTH = 64


def _nested(levels: int) -> Any:
    """``1`` inside ``levels`` lists."""
    return functools.reduce(lambda inner, _: [inner], range(levels), 1)


def test_the_field_rule_names_the_top_level_or_the_models_field() -> None:
    assert request_field(("annotations", 0, 0)) == "annotations"
    assert request_field(("model", "env", "A", 0)) == "model.env"
    assert request_field(("model", 3)) == "model"  # a model that is a list: the field itself
    assert request_field(()) == "request"
    assert request_field(("", "x")) == EMPTY_KEY
    assert dotted_field(("model", "backend_parameters", 3)) == "model.backend_parameters.3"
    assert dotted_field(("\ud800",), "labels") == "labels.\\ud800"  # rendered: always encodable


def test_first_problem_is_bounded_and_in_document_order() -> None:
    """A million levels below the limit are never visited: the first problem is found at the limit."""
    doc = {"a": "ok", "b": {"c": "\udc00"}, "deep": _nested(1_000_000)}
    assert first_problem(doc) == first_problem({"a": "ok", "b": {"c": "\udc00"}})
    problem = first_problem(doc)
    assert problem is not None and (problem.field, problem.message) == (
        "b.c", "is not valid Unicode (it holds a lone surrogate)")
    deep = first_problem({"x": 1, "deep": _nested(1_000_000)}, unicode=False, request=True)
    assert deep is not None and (deep.field, deep.message) == ("deep", "nests more than 64 levels deep")
    assert first_problem(_nested(DEPTH)) is None and first_problem(_nested(DEPTH + 1)) is not None


def test_parse_request_names_the_field_the_schema_or_the_depth_rule_refuses() -> None:
    with pytest.raises(RequestError) as deep:
        parse_request({"model": {**model(), "env": {"A": _nested(100)}}})
    assert (deep.value.field, deep.value.message) == ("model.env", "nests more than 64 levels deep")
    with pytest.raises(RequestError) as typed:
        parse_request({"model": {**model(), "replicas": "two"}})
    assert typed.value.field == "model.replicas" and typed.value.code == "invalid_request"


@pytest.mark.parametrize(("where", "field"), [(("annotations",), "annotations"),
                                              (("model", "env"), "model.env"),
                                              (("model", "a.b"), "model.a.b")])
def test_every_door_names_the_same_field_for_a_deep_request(where: tuple[str, ...], field: str) -> None:
    raw: dict[str, Any] = {"request_id": "deep-1", "model": model()}
    holder: dict[str, Any] = raw if len(where) == 1 else raw["model"]
    holder[where[-1]] = {"A": _nested(200)} if where[-1] == "env" else _nested(200)
    core = schedule(raw)
    intake = normalize(raw)
    body = json.dumps([[raw], {}, {}])
    broker = deep_request(body)
    assert core.error is not None and intake.rejection is not None and intake.rejection.error is not None
    assert broker is not None
    assert core.error.field == intake.rejection.error.field == broker.field == field
    assert core.error.message == intake.rejection.error.message == "nests more than 64 levels deep"
