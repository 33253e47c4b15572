"""Backend parameter parsing with GPUStack's semantics (``gpustack/utils/command.py``).

``backend_parameters`` is a concatenated argv, but users write it loosely: one
token per element (``["--tp-size", "4"]``), ``--k=v`` elements, or a whole
pasted command line in one element (``["--tp-size 2 --pp-size 2"]``).
:func:`flatten_to_argv` reduces every form to the argv SGLang receives, and
every flag look-up in the core reads that argv, never the raw list.

Reading rules (``find_parameter`` and friends upstream):

* a *key* is a token starting with ``-`` that is not ``-``, ``--`` and not a
  number (``float()`` accepts it): ``-1``, ``-0.5``, ``-.5``, ``-inf`` are values;
* ``--k=v`` has the value ``v``; ``--k v`` takes the next token when it is not a
  key; otherwise ``--k`` is bare (no value);
* a value look-up returns the first occurrence *with a value*, so
  ``["--tp-size", "--tp-size=2"]`` reads 2; a boolean look-up reads the first
  occurrence, bare or not.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

#: Values ``find_bool_parameter`` reads as False (``gpustack/utils/command.py: _FALSY_VALUES``).
_FALSE_WORDS = frozenset({"0", "false", "no", "off", "f", "n"})

#: ``strtobool`` vocabulary GPUStack applies to ``--enable-mixed-chunk``.
_STRTOBOOL_TRUE = frozenset({"y", "yes", "t", "true", "on", "1"})
_STRTOBOOL_FALSE = frozenset({"n", "no", "f", "false", "off", "0"})

#: A JSON value is masked while shell-splitting: ``=`` followed by ``{`` or ``[``.
_JSON_OPENERS = "{["
_JSON_CLOSERS = "}]"
#: Placeholder brackets: ASCII unit separator, which survives shlex inside a token
#: and does not occur in real parameters (``command.py: _mask_json_segments``).
_MASK = "\x1f"
#: A shell line continuation (backslash, optional CR, newline).
_CONTINUATION = re.compile(r"\\\r?\n")


class ParameterError(ValueError):
    """Backend parameters that cannot be read (unbalanced quotes, a bad value).

    The message is GPUStack's (shlex's ``No closing quotation``, Python's
    ``could not convert string to float: 'x'``), so it can be shown as is.

    Attributes:
        field: always ``model.backend_parameters``.
    """

    field = "model.backend_parameters"


def is_parameter_key(token: str) -> bool:
    """True when ``token`` is a flag key rather than a value (``command.py: is_parameter_key``)."""
    if not token.startswith("-") or len(token) <= 1 or token == "--":
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False  # a number such as -1 or -0.5 is a value


def _json_end(text: str, start: int) -> int:
    """Index just past the JSON value opening at ``start`` (end of text when unclosed)."""
    depth, in_string, escaped = 0, False, False
    for position in range(start, len(text)):
        char = text[position]
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            in_string = not in_string
        elif not in_string and char in _JSON_OPENERS:
            depth += 1
        elif not in_string and char in _JSON_CLOSERS:
            depth -= 1
            if depth == 0:
                return position + 1
    return len(text)


def _mask_json(text: str) -> tuple[str, dict[str, str]]:
    """Replace every ``=<json>`` value by a placeholder so shlex keeps it whole."""
    pieces: list[str] = []
    masked: dict[str, str] = {}
    position = 0
    while position < len(text):
        if text[position] == "=" and text[position + 1 : position + 2] in tuple(_JSON_OPENERS):
            end = _json_end(text, position + 1)
            placeholder = f"{_MASK}JSON_{len(masked)}{_MASK}"
            masked[placeholder] = text[position + 1 : end]
            pieces.append("=" + placeholder)
            position = end
            continue
        pieces.append(text[position])
        position += 1
    return "".join(pieces), masked


def _unmask_json(tokens: list[str], masked: dict[str, str]) -> list[str]:
    restored: list[str] = []
    for token in tokens:
        for placeholder, value in masked.items():
            if placeholder in token:
                token = token.replace(placeholder, value)
        restored.append(token)
    return restored


def _join_continuations(text: str) -> str:
    """Turn ``\\``-newline continuations into spaces and drop one stray trailing ``\\``.

    Without this shlex refuses a pasted multi-line command ("No escaped character").
    """
    text = _CONTINUATION.sub(" ", text)
    stripped = text.rstrip()
    trailing = len(stripped) - len(stripped.rstrip("\\"))
    return stripped[:-1] if trailing % 2 == 1 else text


def safe_split(expression: str) -> list[str]:
    """Shell-split ``expression`` keeping ``=<json>`` values whole (``command.py: safe_split``).

    Raises:
        ParameterError: unbalanced quotes (shlex's own message, e.g. ``No closing quotation``).
    """
    masked, values = _mask_json(expression)
    try:
        tokens = shlex.split(_join_continuations(masked))
    except ValueError as error:
        raise ParameterError(str(error)) from None
    return _unmask_json(tokens, values)


def flatten_to_argv(parameters: Sequence[str | None] | None) -> list[str]:
    """The argv a ``backend_parameters`` list stands for (``command.py: flatten_to_argv``).

    An element whose first word is a key is re-split as a command line; any
    other element (a value, a JSON blob, a path with spaces) is one token,
    stripped. Empty and null elements are dropped.

    Raises:
        ParameterError: an element has unbalanced quotes.
    """
    return list(_argv(tuple(parameters or ())))


@lru_cache(maxsize=1024)
def _argv(parameters: tuple[str | None, ...]) -> tuple[str, ...]:
    """:func:`flatten_to_argv`, remembered per parameter list: a pure function of the strings
    (a decision reads it twice, and a service sees the same lists request after request);
    an element that cannot be split raises every time (errors are not remembered)."""
    tokens: list[str] = []
    for element in parameters:
        stripped = (element or "").strip()
        if not stripped:
            continue
        if is_parameter_key(stripped.split(None, 1)[0]):
            tokens.extend(safe_split(stripped))
        else:
            tokens.append(stripped)
    return tuple(tokens)


@dataclass(frozen=True, slots=True)
class Flag:
    """One flag of the argv: its name without leading dashes and its value (None when bare)."""

    name: str
    value: str | None


def _flags(argv: Sequence[str]) -> Iterator[Flag]:
    """The flags of ``argv`` in order (``command.py: _iter_param_pairs``); positionals are skipped."""
    position = 0
    while position < len(argv):
        token = argv[position]
        position += 1
        if not is_parameter_key(token):
            continue
        if "=" in token:
            name, _, value = token.partition("=")
            yield Flag(name.lstrip("-"), value)
        elif position < len(argv) and not is_parameter_key(argv[position]):
            yield Flag(token.lstrip("-"), argv[position])
            position += 1
        else:
            yield Flag(token.lstrip("-"), None)


def parse_flags(parameters: Sequence[str | None] | None) -> tuple[Flag, ...]:
    """Flatten ``parameters`` and split the argv into flags, keeping their order.

    Raises:
        ParameterError: an element has unbalanced quotes.
    """
    return tuple(_flags(flatten_to_argv(parameters)))


class BackendParameters:
    """Read-only look-ups over backend parameters, with GPUStack's reading rules.

    Raises:
        ParameterError: from the constructor, when an element cannot be shell-split.
    """

    __slots__ = ("_flags", "argv")

    def __init__(self, parameters: Sequence[str | None] | None) -> None:
        #: The flattened argv (what SGLang receives).
        self.argv: tuple[str, ...] = _argv(tuple(parameters or ()))
        self._flags = tuple(_flags(self.argv))

    def has(self, names: Sequence[str]) -> bool:
        """True when any of ``names`` is present, bare or with a value."""
        return any(flag.name in names for flag in self._flags)

    def find(self, names: Sequence[str]) -> str | None:
        """``find_parameter``: the first value given to any of ``names`` (bare occurrences skipped)."""
        for flag in self._flags:
            if flag.name in names and flag.value is not None:
                return flag.value
        return None

    def find_int(self, names: Sequence[str]) -> int | None:
        """``find_int_parameter``: the value as an integer; None when absent or not an integer."""
        value = self.find(names)
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            return None

    def find_float(self, names: Sequence[str]) -> float | None:
        """The value as a float, None when absent or empty (GPUStack's ``if value: float(value)``).

        Raises:
            ParameterError: the value is not a number (Python's ``float()`` message).
        """
        value = self.find(names)
        if not value:
            return None
        try:
            return float(value)
        except ValueError as error:
            raise ParameterError(str(error)) from None

    def find_bool(self, names: Sequence[str]) -> bool:
        """``find_bool_parameter``: the first occurrence decides; bare is True, a false word False."""
        for flag in self._flags:
            if flag.name in names:
                return flag.value is None or flag.value.lower() not in _FALSE_WORDS
        return False

    def find_strtobool(self, names: Sequence[str]) -> bool:
        """``find_parameter`` + ``strtobool``: absent (or only bare) is False.

        Raises:
            ParameterError: the value is not a truth word (``invalid truth value 'x'``).
        """
        value = self.find(names)
        if value is None:
            return False
        word = value.lower()
        if word in _STRTOBOOL_TRUE:
            return True
        if word in _STRTOBOOL_FALSE:
            return False
        raise ParameterError(f"invalid truth value {word!r}")
