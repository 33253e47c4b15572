"""The service's bounds: sizes name their limit, nesting and invalid Unicode name the value."""

from __future__ import annotations

import pytest

from tasks.intake.limits import MAX_JSON_DEPTH, InvalidField, check_document, check_size, nesting_path


def _nested(depth: int) -> object:
    value: object = 0
    for _ in range(depth):
        value = [value]
    return value


def test_nesting_counts_containers_as_the_core_does() -> None:
    # the core's too_deep allows exactly MAX_JSON_DEPTH levels of containers
    assert nesting_path(_nested(MAX_JSON_DEPTH)) is None
    assert nesting_path(_nested(MAX_JSON_DEPTH + 1)) == ".".join(["0"] * MAX_JSON_DEPTH)
    assert nesting_path({"a": {"b": _nested(MAX_JSON_DEPTH)}}) == "a.b" + ".0" * (MAX_JSON_DEPTH - 2)


def test_any_depth_is_inspected_without_recursion() -> None:
    assert nesting_path({"x": 1, "deep": _nested(100_000)}, limit=3) == "deep.0.0"


def test_the_first_offending_value_in_document_order_is_named() -> None:
    document = {"a": ["ok", "\ud800"], "b": "\udfff"}
    with pytest.raises(InvalidField) as raised:
        check_document(document, root="model")
    assert raised.value.field == "model.a.1" and "lone surrogate" in raised.value.message
    with pytest.raises(InvalidField) as key:
        check_document({"labels": {"\ud800": "x"}})
    assert key.value.field == "labels" and "key" in key.value.message
    check_document({"name": "Grüße 模型"})  # valid non-ASCII passes


def test_sizes_are_utf8_bytes_and_name_the_setting() -> None:
    check_size("é" * 2, 4, field="request", setting="max_request_bytes")  # 4 bytes: at the limit
    with pytest.raises(InvalidField) as raised:
        check_size("é" * 3, 4, field="request", setting="max_request_bytes")
    assert str(raised.value) == "request: is 6 bytes of JSON, above the max_request_bytes limit of 4 bytes"
