"""Byte conversions with GPUStack's rounding (``gpustack/utils/unit.py``)."""

from __future__ import annotations

#: Bytes in one GiB / MiB (binary units, as GPUStack uses them).
GIB = 1 << 30
MIB = 1 << 20


def byte_to_gib(value: float) -> float:
    """Convert bytes to GiB rounded to 2 decimals, exactly like GPUStack's ``byte_to_gib``.

    The result is a float whose ``str()`` is what GPUStack prints in its messages
    (``75.23``, ``24.0``, ``0.0``).
    """
    return round(value / GIB, 2)


def byte_to_mib(value: float) -> float:
    """Convert bytes to MiB rounded to 2 decimals, like GPUStack's ``byte_to_mib``."""
    return round(value / MIB, 2)
