"""Bounds on untrusted input that the schema alone cannot express.

Everything a client or a GPU worker reports is untrusted. Typed fields are
bounded in :mod:`scheduler_core._schemas` (bytes and ids fit a signed 64-bit
integer); this module checks what is free-form: how deeply a value nests
(``hf_config`` is any JSON object, and a request may carry unknown fields) and
whether a string can be written out as UTF-8 at all (JSON allows a lone UTF-16
surrogate such as ``"\\ud800"``, which no result serialiser accepts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
