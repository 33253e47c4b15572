"""``scheduler_core.limits``: the recursion-free canonical JSON writer behind request ids."""

from __future__ import annotations

import datetime
import enum
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core import canonical_json
from scheduler_core.limits import flat_canonical_json, render_text, render_value, too_deep

_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()  # any code point, lone surrogates included (JSON escapes them as \udXXX)
)
_keys = st.text() | st.integers()
_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4) | st.tuples(children, children)
    | st.dictionaries(_keys, children, max_size=4),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(_values)
def test_equals_canonical_json_on_ordinary_values(value: Any) -> None:
    """Byte for byte the text of ``json.dumps(sort_keys, compact, default=str)``, so every
    request that had an id keeps it."""
    try:
        expected = canonical_json(value)
    except TypeError:  # str and int keys in one dict cannot be sorted: json refuses, so do we
        with pytest.raises(TypeError):
            flat_canonical_json(value)
        return
    assert flat_canonical_json(value) == expected


class _Level(enum.IntEnum):
    HIGH = 3


@pytest.mark.parametrize(
    "value",
    [
        {1.5: "float key", True: "bool key", 2: "int key"},
        {None: "none key"},
        {_Level.HIGH: _Level.HIGH},
        datetime.date(2026, 12, 1),  # json's default=str
        {"when": datetime.date(2026, 12, 1), "é": "\u2028"},
        [float("nan"), float("inf"), -float("inf"), -0.0, 10**30],
    ],
)
def test_equals_canonical_json_on_json_conversions(value: Any) -> None:
    assert flat_canonical_json(value) == canonical_json(value)


def test_writes_values_too_deep_for_recursion() -> None:
    deep: Any = 0
    for _ in range(100_000):
        deep = {"x": [deep]}
    text = flat_canonical_json(deep)
    assert text == '{"x":[' * 100_000 + "0" + "]}" * 100_000
    assert too_deep(deep)


def test_a_value_that_contains_itself_is_refused_as_json_refuses_it() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference detected"):
        flat_canonical_json(loop)
    with pytest.raises(ValueError, match="Circular reference detected"):
        json.dumps(loop)
    shared = [1]
    assert flat_canonical_json([shared, shared]) == "[[1],[1]]"  # repeated, not circular


# ------------------------------------------------------------- render_text
_printable_ascii = st.characters(min_codepoint=0x20, max_codepoint=0x7E, exclude_characters='"\\')
_surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=_printable_ascii | _surrogates, max_size=20))
def test_render_text_writes_each_lone_surrogate_as_json_escapes_it(text: str) -> None:
    """On ASCII plus lone surrogates, the rendering is exactly what the standard library's
    JSON writer prints between the quotes (its own ``\\uXXXX`` escape, lower-case hex)."""
    assert render_text(text) == json.dumps(text)[1:-1]
    render_text(text).encode("utf-8")  # and it encodes (the codec's own check)


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(exclude_categories=["Cs"])))
def test_render_text_leaves_valid_unicode_alone(text: str) -> None:
    assert render_text(text) is text


def test_render_value_renders_keys_and_strings_at_any_depth() -> None:
    deep: Any = "\udfff"
    for _ in range(5000):  # deeper than the interpreter's recursion
        deep = [deep]
    rendered = render_value({"\ud800": [{"k": "a\udc00"}], "deep": deep, "n": 1})
    assert rendered["\\ud800"] == [{"k": "a\\udc00"}] and rendered["n"] == 1
    leaf = rendered["deep"]
    for _ in range(5000):
        (leaf,) = leaf
    assert leaf == "\\udfff"
    valid = {"a": [1, "π"]}
    assert render_value(valid) is valid  # nothing to render: no copy
