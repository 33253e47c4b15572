"""Placement strategies, one module each, run in GPUStack's order."""

from __future__ import annotations

from scheduler_core.strategies._base import Candidate, Claim, Selection, Strategy, Subordinate
from scheduler_core.strategies.manual import ManualGpuSelection
from scheduler_core.strategies.multi_worker import MultiWorkerMultiGpu
from scheduler_core.strategies.single_gpu import SingleWorkerSingleGpu
from scheduler_core.strategies.single_worker import SingleWorkerMultiGpu

#: GPUStack's order: manual → 1 GPU → 1 worker with N GPUs → N workers.
DEFAULT_STRATEGIES: tuple[Strategy, ...] = (
    ManualGpuSelection(),
    SingleWorkerSingleGpu(),
    SingleWorkerMultiGpu(),
    MultiWorkerMultiGpu(),
)

#: Strategies by name, for deployments that compose their own chain.
STRATEGIES_BY_NAME: dict[str, Strategy] = {s.name: s for s in DEFAULT_STRATEGIES}

__all__ = [
    "DEFAULT_STRATEGIES",
    "STRATEGIES_BY_NAME",
    "Candidate",
    "Claim",
    "ManualGpuSelection",
    "MultiWorkerMultiGpu",
    "Selection",
    "SingleWorkerMultiGpu",
    "SingleWorkerSingleGpu",
    "Strategy",
    "Subordinate",
]
