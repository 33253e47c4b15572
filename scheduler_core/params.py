"""Backend parameter parsing with GPUStack's semantics (``gpustack/utils/command.py``).

SGLang launch flags arrive as a list of strings in one of three forms:
``--k=v``, ``--k v`` (two tokens) and a bare ``--k``. A bare flag has no value:
:func:`find_parameter` returns ``None`` for it, :func:`find_bool_parameter`
treats it as ``True``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

#: A token that is a value even though it starts with "-" (a negative number).
_NEGATIVE_NUMBER = re.compile(r"^-\d+(\.\d+)?$")

#: Values ``find_bool_parameter`` reads as False (GPUStack's list).
_FALSE_WORDS = frozenset({"0", "false", "no", "off", "f", "n"})

#: ``transformers.utils.strtobool`` vocabulary, used for ``--enable-mixed-chunk``.
_STRTOBOOL_TRUE = frozenset({"y", "yes", "t", "true", "on", "1"})
_STRTOBOOL_FALSE = frozenset({"n", "no", "f", "false", "off", "0"})


class ParameterError(ValueError):
    """A backend parameter has a value of the wrong type.

    Attributes:
        field: always ``model.backend_parameters``.
    """

    field = "model.backend_parameters"


@dataclass(frozen=True, slots=True)
class Flag:
    """One parsed flag: its name without leading dashes and its value (None when bare)."""

    name: str
    value: str | None


def _is_flag(token: str) -> bool:
    return token.startswith("-") and not _NEGATIVE_NUMBER.match(token)


def parse_flags(parameters: Sequence[str] | None) -> tuple[Flag, ...]:
    """Split backend parameters into flags, keeping their order.

    Tokens that are neither a flag nor the value of the preceding flag
    (positional arguments) are ignored, as GPUStack's lookups ignore them.
    """
    flags: list[Flag] = []
    tokens = list(parameters or ())
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not _is_flag(token):
            continue
        name, sep, value = token.lstrip("-").partition("=")
        if sep:
            flags.append(Flag(name, value))
        elif i < len(tokens) and not _is_flag(tokens[i]):
            flags.append(Flag(name, tokens[i]))
            i += 1
        else:
            flags.append(Flag(name, None))
    return tuple(flags)


class BackendParameters:
    """Read-only lookups over parsed backend parameters (first occurrence wins)."""

    __slots__ = ("_flags",)

    def __init__(self, parameters: Sequence[str] | None) -> None:
        self._flags = parse_flags(parameters)

    def has(self, names: Sequence[str]) -> bool:
        """True when any of ``names`` is present, bare or with a value."""
        return any(flag.name in names for flag in self._flags)

    def find(self, names: Sequence[str]) -> str | None:
        """The value of the first flag named in ``names``; None when absent or bare."""
        for flag in self._flags:
            if flag.name in names:
                return flag.value
        return None

    def find_int(self, names: Sequence[str]) -> int | None:
        """The integer value of the first matching flag.

        Raises:
            ParameterError: the flag has a value that is not an integer.
        """
        value = self.find(names)
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            raise ParameterError(f"Invalid value for --{names[0]}: {value!r} is not an integer.") from None

    def find_float(self, names: Sequence[str]) -> float | None:
        """The float value of the first matching flag (None when absent or bare).

        Raises:
            ParameterError: the value is not a number.
        """
        value = self.find(names)
        if not value:
            return None
        try:
            return float(value)
        except ValueError:
            raise ParameterError(f"Invalid value for --{names[0]}: {value!r} is not a number.") from None

    def find_bool(self, names: Sequence[str]) -> bool:
        """GPUStack's ``find_bool_parameter``: bare flag is True, 0/false/no/off/f/n False."""
        for flag in self._flags:
            if flag.name in names:
                return flag.value is None or flag.value.lower() not in _FALSE_WORDS
        return False

    def find_strtobool(self, names: Sequence[str]) -> bool:
        """``find_parameter`` + ``strtobool``: a bare flag reads as False (GPUStack quirk).

        Raises:
            ParameterError: the value is not a truth word.
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
