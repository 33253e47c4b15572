"""Placement strategies, one module each, run in GPUStack's order."""

from __future__ import annotations

from scheduler_core.strategies.manual import ManualGpuSelection
from scheduler_core.strategies.multi_worker import MultiWorkerMultiGpu
from scheduler_core.strategies.single_gpu import SingleWorkerSingleGpu
from scheduler_core.strategies.single_worker import SingleWorkerMultiGpu

__all__ = [
    "ManualGpuSelection",
    "MultiWorkerMultiGpu",
    "SingleWorkerMultiGpu",
    "SingleWorkerSingleGpu",
]
