"""GPU ids of manual selection: ``<worker_name>:<type>:<index>`` (``gpustack/utils/gpu.py``).

The one parser of the format, for the core's manual selection and filter and
for anything outside the core that needs a selection's worker names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

#: ``utils/gpu.py: parse_gpu_id``'s pattern: the worker name may itself contain ``:``.
_GPU_ID = re.compile(r"^(?P<worker_name>.+):(?P<device>[^:]+):(?P<gpu_index>\d+)$")


@dataclass(frozen=True, slots=True)
class GpuId:
    """One parsed GPU id."""

    worker_name: str
    gpu_type: str
    index: int


def parse_gpu_id(gpu_id: str) -> GpuId | None:
    """The parts of ``gpu_id``, or None when it does not have the format."""
    match = _GPU_ID.match(gpu_id)
    if match is None:
        return None
    return GpuId(match["worker_name"], match["device"], int(match["gpu_index"]))


def selected_worker_names(gpu_ids: Iterable[str]) -> list[str]:
    """Worker names of a selection in first-seen order (malformed ids are skipped)."""
    names: dict[str, None] = {}
    for gpu_id in gpu_ids:
        parsed = parse_gpu_id(gpu_id)
        if parsed is not None:
            names.setdefault(parsed.worker_name)
    return list(names)
