"""Bounds on untrusted input that the schema alone cannot express.

Everything a client or a GPU worker reports is untrusted. Typed fields are
bounded in :mod:`scheduler_core._schemas` (bytes and ids fit a signed 64-bit
integer); this module checks what is free-form: how deeply a value nests
(``hf_config`` is any JSON object, and a request may carry unknown fields) and
whether a string can be written out as UTF-8 at all (JSON allows a lone UTF-16
surrogate such as ``"\\ud800"``, which no result serialiser accepts).
"""

from __future__ import annotations

import json.encoder
from collections.abc import Iterator, Mapping
from typing import Any

#: JSON's string writer (the C one where built), as ``json.dumps(ensure_ascii=True)`` uses it.
_write_string = json.encoder.encode_basestring_ascii

#: Deepest nesting accepted in a free-form value. Real configs nest a few levels;
#: a thousand levels exhaust the interpreter's recursion while hashing or copying.
MAX_DEPTH = 64


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True when ``value`` nests objects or arrays more than ``limit`` levels (iterative)."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        pending.extend((child, depth + 1) for child in children)
    return False


def encodable(text: str) -> bool:
    """Whether ``text`` is valid Unicode (no lone surrogate), i.e. can be written as UTF-8."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def flat_canonical_json(value: Any) -> str:
    """Sorted-key, compact JSON of ``value``, written without recursion (any depth).

    The same text as ``json.dumps(value, sort_keys=True, separators=(",", ":"),
    default=str)`` (:func:`scheduler_core.canonical_json`) for every value that call
    can write; it also writes values nested too deeply for the interpreter's
    recursion, so a request of any depth has a content digest. It follows the C
    encoder of the standard ``json`` module: only ``dict`` is an object and ``list``
    or ``tuple`` an array (other types are written as their ``str()``), dict items
    sorted as ``sorted(d.items())`` sorts them, keys converted as JSON converts
    them, non-ASCII escaped, ``NaN``/``Infinity`` written as ``json`` writes them.

    Raises:
        ValueError: ``value`` contains itself (``json`` refuses it the same way).
        TypeError: a key that is not a str, int, float, bool or None, or keys that
            cannot be ordered (``json`` refuses those too).
    """
    return "".join(_pieces(value))


def _pieces(value: Any) -> Iterator[str]:
    """The text of ``value`` piece by piece, from an explicit stack (pieces and values)."""
    # a stack entry is a literal piece (str), a value to write (tuple), or an id to
    # leave (int): the containers being written, to refuse a value that contains itself
    stack: list[str | tuple[Any] | int] = [(value,)]
    open_ids: set[int] = set()
    while stack:
        entry = stack.pop()
        if isinstance(entry, str):
            yield entry
            continue
        if isinstance(entry, int):
            open_ids.discard(entry)
            continue
        item = entry[0]
        if isinstance(item, list | tuple | dict):
            if id(item) in open_ids:
                raise ValueError("Circular reference detected")
            open_ids.add(id(item))
            yield "{" if isinstance(item, dict) else "["
            stack.append(id(item))
            stack.extend(reversed(_members(item)))
        else:
            yield _scalar(item)


def _members(item: list[Any] | tuple[Any, ...] | dict[Any, Any]) -> list[str | tuple[Any]]:
    """The pieces and values of one container, in writing order, with its closing bracket."""
    members: list[str | tuple[Any]] = []
    if isinstance(item, dict):
        for position, (key, child) in enumerate(sorted(item.items())):
            members += [*([","] if position else []), _write_string(_key(key)) + ":", (child,)]
        return [*members, "}"]
    for position, child in enumerate(item):
        members += [*([","] if position else []), (child,)]
    return [*members, "]"]


def _key(key: Any) -> str:
    """A dict key as JSON writes it (a string), or TypeError as JSON raises it."""
    if isinstance(key, str):
        return key
    if isinstance(key, float):
        return _float(key)
    if key is True or key is False or key is None:
        return _scalar(key)
    if isinstance(key, int):
        return int.__repr__(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _scalar(item: Any) -> str:
    """A value that is neither a dict, a list nor a tuple, as JSON writes it."""
    if item is None:
        return "null"
    if item is True:
        return "true"
    if item is False:
        return "false"
    if isinstance(item, str):
        return _write_string(item)
    if isinstance(item, int):
        return int.__repr__(item)
    if isinstance(item, float):
        return _float(item)
    return _write_string(str(item))  # json's default=str, then written as a string


def _float(number: float) -> str:
    if number != number:
        return "NaN"
    if number in (float("inf"), float("-inf")):
        return "Infinity" if number > 0 else "-Infinity"
    return float.__repr__(number)
