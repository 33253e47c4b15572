"""gpusched placement core: GPUStack-faithful SGLang placement, pure and deterministic.

Public API::

    from scheduler_core import schedule, tune
    result = schedule({"model": {...}, "workers": [...], "model_instances": [...]})
    plan = tune({"explicit_args": {...}, "platform": {...}, "pipeline": {...}})

Besides the two entry points, the names a service built on the core needs:
the wire models, the chain, its plugins by name and the policies' settings
(keyed by type), the reason codes and the wake rules they imply (with the
strategies' wake floors), the claims arithmetic the ledger shares with the
core, the GPU-id parser and the request-id rule.
"""

from __future__ import annotations

from scheduler_core._schemas import (
    WORKER_STATES,
    CandidateOut,
    ErrorOut,
    EstimateOut,
    EventOut,
    Gpu,
    LaunchOut,
    ModelInstance,
    ModelSpec,
    ScheduleRequest,
    ScheduleResult,
    Worker,
)
from scheduler_core.accounting import gpu_capacity, instance_claims, occupied_workers
from scheduler_core.arguments import evaluated_gpus_per_replica
from scheduler_core.cycle import CycleState, PolicySettings
from scheduler_core.decision import (
    UNHASHABLE_REQUEST_ID,
    Decided,
    canonical_json,
    decide,
    request_id_for,
    schedule,
)
from scheduler_core.diffusion import TuneRequest, TuneResult, tune
from scheduler_core.errors import RequestError
from scheduler_core.framework import Chain
from scheduler_core.gpu_ids import GpuId, parse_gpu_id, selected_worker_names
from scheduler_core.hooks import chain_wake_table, deciding, wake_floor, worker_admits
from scheduler_core.limits import encodable, render_text, render_value
from scheduler_core.memo import SnapshotMemo, extended
from scheduler_core.plugins import DEFAULT_CHAIN, FILTERS_BY_NAME, STRATEGIES_BY_NAME, chain_of
from scheduler_core.precise.settings import PreciseSettings
from scheduler_core.reasons import MORE_CAPACITY, ClusterChange, Reason
from scheduler_core.validation import (
    EMPTY_KEY,
    Problem,
    dotted_field,
    first_problem,
    parse_request,
    request_field,
)
from scheduler_core.wake import GpuFloor

__all__ = [
    "DEFAULT_CHAIN",
    "EMPTY_KEY",
    "FILTERS_BY_NAME",
    "MORE_CAPACITY",
    "STRATEGIES_BY_NAME",
    "UNHASHABLE_REQUEST_ID",
    "WORKER_STATES",
    "CandidateOut",
    "Chain",
    "ClusterChange",
    "CycleState",
    "Decided",
    "ErrorOut",
    "EstimateOut",
    "EventOut",
    "Gpu",
    "GpuFloor",
    "GpuId",
    "LaunchOut",
    "ModelInstance",
    "ModelSpec",
    "PolicySettings",
    "PreciseSettings",
    "Problem",
    "Reason",
    "RequestError",
    "ScheduleRequest",
    "ScheduleResult",
    "SnapshotMemo",
    "TuneRequest",
    "TuneResult",
    "Worker",
    "canonical_json",
    "chain_of",
    "chain_wake_table",
    "decide",
    "deciding",
    "dotted_field",
    "encodable",
    "evaluated_gpus_per_replica",
    "extended",
    "first_problem",
    "gpu_capacity",
    "instance_claims",
    "occupied_workers",
    "parse_gpu_id",
    "parse_request",
    "render_text",
    "render_value",
    "request_field",
    "request_id_for",
    "schedule",
    "selected_worker_names",
    "tune",
    "wake_floor",
    "worker_admits",
]
