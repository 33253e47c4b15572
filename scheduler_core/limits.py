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
import re
from collections.abc import Iterator, Mapping
from typing import Any

#: JSON's string writer (the C one where built), as ``json.dumps(ensure_ascii=True)`` uses it.
_write_string = json.encoder.encode_basestring_ascii

#: Deepest nesting accepted in a free-form value. Real configs nest a few levels;
#: a thousand levels exhaust the interpreter's recursion while hashing or copying.
MAX_DEPTH = 64


#: The one text of a value nested too deeply (every door refuses with it).
TOO_DEEP = f"nests more than {MAX_DEPTH} levels deep"
#: The one text of a string that cannot be written as UTF-8.
NOT_UNICODE = "is not valid Unicode (it holds a lone surrogate)"
#: The same, for a key.
KEY_NOT_UNICODE = "has a key that is not valid Unicode (it holds a lone surrogate)"

#: A path into a document: keys and list positions from the root.
Path = tuple[object, ...]


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True when ``value`` nests objects or arrays more than ``limit`` levels (iterative)."""
    return next(problems(value, limit, unicode=False), None) is not None


def problems(value: Any, limit: int = MAX_DEPTH, *, unicode: bool = True) -> Iterator[tuple[Path, str]]:
    """The one nesting (and Unicode) checker: ``(path, problem)`` of each offending value, in
    document order, lazily (the first costs only the values before it).

    A container at the root is level 1; ``limit`` levels of containers are allowed, and
    nothing below an offending container is visited. With ``unicode``, every string and
    key must be valid Unicode (:func:`encodable`). Iterative: any depth is safe to inspect.
    """
    # each entry carries its path as a (parent link, key) chain, made a tuple only when reported
    pending: list[tuple[Any, int, Any]] = [(value, 0, None)]
    while pending:
        item, depth, link = pending.pop()
        if isinstance(item, str):
            if unicode and not encodable(item):
                yield _path(link), NOT_UNICODE
            continue
        if isinstance(item, Mapping):
            children: list[tuple[Any, Any]] = list(item.items())
        elif isinstance(item, list | tuple):
            children = list(enumerate(item))
        else:
            continue
        if depth >= limit:
            yield _path(link), f"nests more than {limit} levels deep"
            continue
        if unicode and any(isinstance(key, str) and not encodable(key) for key, _ in children):
            yield _path(link), KEY_NOT_UNICODE
        pending.extend((child, depth + 1, (link, key)) for key, child in reversed(children))


def _path(link: Any) -> Path:
    parts: list[object] = []
    while link is not None:
        link, key = link
        parts.append(key)
    return tuple(reversed(parts))


def encodable(text: str) -> bool:
    """Whether ``text`` is valid Unicode (no lone surrogate), i.e. can be written as UTF-8."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


#: A lone UTF-16 surrogate: a code point JSON can escape but no encoder can write.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def render_text(text: str) -> str:
    """User-derived text as the service and the core echo it: always encodable.

    The one rendering of anything derived from input that goes into a result, an
    event or a log (a field name built from a key, a message quoting a value): each
    lone surrogate becomes the six visible characters of its JSON escape (``"\\ud800"``
    → ``\\ud800``, lower-case hex), every other character is kept. Deterministic, and
    the identity on valid Unicode (the common case costs one ``isascii``/``encode``
    check), so a rendered text can be written as UTF-8, JSON or a Redis argument.
    """
    if encodable(text):
        return text
    return _LONE_SURROGATE.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def render_value(value: Any) -> Any:
    """A JSON-shaped value with every string and key passed through :func:`render_text`.

    For echoing a whole document that was refused (a rejected cluster event) into
    the audit log. Iterative (any depth); containers are copied only where they
    change, other values are returned as they are.
    """
    if isinstance(value, str):
        return render_text(value)
    if not isinstance(value, Mapping | list | tuple) or not _holds_unencodable(value):
        return value
    return _rendered_copy(value)


def _holds_unencodable(value: Any) -> bool:
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if not encodable(item):
                return True
        elif isinstance(item, Mapping):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return False


def _rendered_copy(value: Any) -> Any:
    """A copy of ``value`` with strings and keys rendered, built from an explicit stack."""
    root: list[Any] = [None]
    pending: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while pending:
        item, parent, slot = pending.pop()
        if isinstance(item, Mapping):
            copy: Any = {}
            for key, child in item.items():
                name = render_text(key) if isinstance(key, str) else key
                copy[name] = None
                pending.append((child, copy, name))
        elif isinstance(item, list | tuple):
            copy = [None] * len(item)
            pending.extend((child, copy, position) for position, child in enumerate(item))
        else:
            copy = render_text(item) if isinstance(item, str) else item
        parent[slot] = copy
    return root[0]


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
