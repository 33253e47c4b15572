"""gpusched placement core: GPUStack-faithful SGLang placement, pure and deterministic.

Public API::

    from scheduler_core import schedule
    result = schedule({"model": {...}, "workers": [...], "model_instances": [...]})
"""

from __future__ import annotations

from scheduler_core._schemas import (
    CandidateOut,
    ErrorOut,
    EstimateOut,
    EventOut,
    LaunchOut,
    ModelInstance,
    ModelSpec,
    ScheduleRequest,
    ScheduleResult,
    Worker,
)
from scheduler_core.schedule import canonical_json, schedule

__all__ = [
    "CandidateOut",
    "ErrorOut",
    "EstimateOut",
    "EventOut",
    "LaunchOut",
    "ModelInstance",
    "ModelSpec",
    "ScheduleRequest",
    "ScheduleResult",
    "Worker",
    "canonical_json",
    "schedule",
]
