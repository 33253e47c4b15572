"""Backend parameters written the ways users write them.

A user's intent is a list of ``(flag, value)`` pairs (``value`` ``None`` for a
bare switch); ``render`` writes it in one of the forms GPUStack accepts in
``backend_parameters`` (see ``gpustack/utils/command.py: flatten_to_argv``): a
token per list element, ``--flag=value``, one element per pair, padded with
spaces, quoted, several pairs pasted into one element, a pasted multi-line
command with ``\\``-newline continuations, or a mix of these.
"""

from __future__ import annotations

import random
from collections.abc import Callable

Pair = tuple[str, str | None]

FORMS = ("separate", "equals", "one_element", "padded", "quoted", "joined", "continuation", "mixed")


def _separate(pair: Pair, rng: random.Random) -> list[str]:
    flag, value = pair
    return [flag] if value is None else [flag, value]


def _equals(pair: Pair, rng: random.Random) -> list[str]:
    flag, value = pair
    return [flag] if value is None else [f"{flag}={value}"]


def _one_element(pair: Pair, rng: random.Random) -> list[str]:
    flag, value = pair
    return [flag] if value is None else [f"{flag} {value}"]


def _padded(pair: Pair, rng: random.Random) -> list[str]:
    flag, value = pair
    left, middle, right = (" " * rng.randint(1, 3) for _ in range(3))
    return [f"{left}{flag}{right}"] if value is None else [f"{left}{flag}{middle}{value}{right}"]


def _quoted(pair: Pair, rng: random.Random) -> list[str]:
    flag, value = pair
    if value is None or value.startswith(("{", "[")) or "'" in value or '"' in value:
        return _equals(pair, rng)
    quote = rng.choice(['"', "'"])
    return [f"{flag}={quote}{value}{quote}"] if rng.random() < 0.6 else [f"{flag} {quote}{value}{quote}"]


_SINGLE: dict[str, Callable[[Pair, random.Random], list[str]]] = {
    "separate": _separate,
    "equals": _equals,
    "one_element": _one_element,
    "padded": _padded,
    "quoted": _quoted,
}


def _shell_word(pair: Pair) -> str:
    flag, value = pair
    if value is None:
        return flag
    if value.startswith(("{", "[")):
        return f"{flag}={value}"  # a JSON value after '=' stays one token
    return f"{flag} {value}"


def _joined(pairs: list[Pair], rng: random.Random) -> list[str]:
    return [" ".join(_shell_word(pair) for pair in pairs)] if pairs else []


def _continuation(pairs: list[Pair], rng: random.Random) -> list[str]:
    if not pairs:
        return []
    text = " \\\n  ".join(_shell_word(pair) for pair in pairs)
    if rng.random() < 0.2:
        text += " \\"  # a stray trailing backslash, as pasted from a recipe
    return [text]


def render(pairs: list[Pair], form: str, rng: random.Random) -> list[str]:
    """``backend_parameters`` for ``pairs`` written in ``form`` (one of ``FORMS``)."""
    if form == "joined":
        return _joined(pairs, rng)
    if form == "continuation":
        return _continuation(pairs, rng)
    if form == "mixed":
        out: list[str] = []
        for pair in pairs:
            out += _SINGLE[rng.choice(tuple(_SINGLE))](pair, rng)
        return out
    write = _SINGLE[form]
    return [token for pair in pairs for token in write(pair, rng)]
