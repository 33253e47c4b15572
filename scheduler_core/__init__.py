"""gpusched placement core: GPUStack-faithful SGLang placement, pure and deterministic.

Public API::

    from scheduler_core import schedule, tune
    result = schedule({"model": {...}, "workers": [...], "model_instances": [...]})
    plan = tune({"explicit_args": {...}, "platform": {...}, "pipeline": {...}})
"""

from __future__ import annotations

from scheduler_core._schemas import (
    WORKER_STATES,
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
from scheduler_core.cluster import SnapshotMemo
from scheduler_core.decision import DEFAULT_CHAIN, Chain, canonical_json, schedule
from scheduler_core.diffusion import TuneRequest, TuneResult, tune

__all__ = [
    "DEFAULT_CHAIN",
    "WORKER_STATES",
    "CandidateOut",
    "Chain",
    "ErrorOut",
    "EstimateOut",
    "EventOut",
    "LaunchOut",
    "ModelInstance",
    "ModelSpec",
    "ScheduleRequest",
    "ScheduleResult",
    "SnapshotMemo",
    "TuneRequest",
    "TuneResult",
    "Worker",
    "canonical_json",
    "schedule",
    "tune",
]
