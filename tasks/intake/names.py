"""Identifiers the service builds Redis keys and Lua-parsed lists from, and their alphabets.

A GPU is booked under ``<worker_id>:<gpu_type>:<index>`` in ledger lists the
Lua scripts split on ``;`` and ``=``; a request id becomes
``gpusched:req:<id>``, the instance key ``req:<id>``, a ``;``-joined list of
taken-over requests and a timer member. A value holding a separator could
cross into another entry (a GPU type ``x;2:cuda`` once rewrote worker 2's
capacity), so these strings are refused at the door, naming the field, unless
they match a conservative alphabet:

============== =================================== ==========================================
identifier     alphabet                            why
============== =================================== ==========================================
GPU ``type``   ``[A-Za-z0-9._-]{1,64}``            GPUStack's types: ``cuda``, ``rocm``, ``cann``, ...
worker name    ``[A-Za-z0-9._-]{1,253}``           host names (RFC 1123 letters, digits, ``-``,
                                                   ``.``; GPUStack names a worker after its host)
                                                   plus ``_``; never ``:``, which separates
                                                   GPUStack's ``<worker>:<type>:<index>`` ids
request id     ``[A-Za-z0-9._:@/+~-]{1,200}``      UUIDs, names, ``req-<digest>``, ``<id>~<n>``
============== =================================== ==========================================

Instance names and labels are stored inside JSON only; they need valid
Unicode (:mod:`tasks.intake.limits`), not an alphabet.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tasks.intake.limits import InvalidField

GPU_TYPE = re.compile(r"[A-Za-z0-9._-]{1,64}")
WORKER_NAME = re.compile(r"[A-Za-z0-9._-]{1,253}")
REQUEST_ID = re.compile(r"[A-Za-z0-9._:@/+~-]{1,200}")


def check_name(value: Any, pattern: re.Pattern[str], field: str, *, optional: bool = False) -> None:
    """Refuse a string outside ``pattern`` (None passes when ``optional``).

    Raises:
        InvalidField: naming ``field`` and the alphabet (never echoing the value).
    """
    if value is None and optional:
        return
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InvalidField(field, f"must match {pattern.pattern}")


def check_worker_row(name: Any, gpu_types: Iterable[Any], field: str) -> None:
    """A worker's name and its GPUs' types, in device order (``<field>.name``,
    ``<field>.status.gpu_devices.<n>.type``; a GPU may have no type).

    Raises:
        InvalidField: the first offending string.
    """
    check_name(name, WORKER_NAME, f"{field}.name")
    for position, gpu_type in enumerate(gpu_types):
        check_name(gpu_type, GPU_TYPE, f"{field}.status.gpu_devices.{position}.type", optional=True)


def check_instance_row(
    worker_name: Any, gpu_type: Any, subordinates: Sequence[Mapping[str, Any]], field: str
) -> None:
    """An instance row's worker names and GPU types (its own and its subordinate workers').

    Raises:
        InvalidField: the first offending string.
    """
    check_name(worker_name, WORKER_NAME, f"{field}.worker_name", optional=True)
    check_name(gpu_type, GPU_TYPE, f"{field}.gpu_type", optional=True)
    for position, subordinate in enumerate(subordinates):
        where = f"{field}.distributed_servers.subordinate_workers.{position}"
        check_name(subordinate.get("worker_name"), WORKER_NAME, f"{where}.worker_name", optional=True)
        check_name(subordinate.get("gpu_type"), GPU_TYPE, f"{where}.gpu_type", optional=True)
