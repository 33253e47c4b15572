"""``policy: gpustack``: GPUStack's stages in its order, its scorer and its estimate headline."""

from __future__ import annotations

from scheduler_core.framework import GPUSTACK, Policy
from scheduler_core.messages import default_message
from scheduler_core.scoring import GpustackScorer
from scheduler_core.strategies.manual import ManualGpuSelection
from scheduler_core.strategies.multi_worker import MultiWorkerMultiGpu
from scheduler_core.strategies.single_gpu import SingleWorkerSingleGpu
from scheduler_core.strategies.single_worker import SingleWorkerMultiGpu

#: GPUStack's manual stage: placement on the GPUs the user selected (``precise`` runs it too).
MANUAL_STAGE = ManualGpuSelection()

#: GPUStack's order: manual → 1 GPU → 1 worker with N GPUs → N workers.
GPUSTACK_POLICY = Policy(
    name=GPUSTACK,
    strategies=(MANUAL_STAGE, SingleWorkerSingleGpu(), SingleWorkerMultiGpu(), MultiWorkerMultiGpu()),
    scorer=GpustackScorer(),
    headline=default_message,
)
