"""What GPUStack's stages share: no facts of their own, and their wake floor in shares."""

from __future__ import annotations

from scheduler_core.cycle import CycleState, DecisionInputs
from scheduler_core.wake import GpuFloor, WakeQuery


class GpustackStage:
    """A GPUStack stage: reads only the selection, and skips a GPU below its type's fraction.

    Every automatic stage (one GPU, one worker's GPUs, several workers) leaves out a GPU
    whose allocatable share is below the fraction of its type
    (``sglang_resource_fit_selector.py``: the ``allocatable / total < mem_fraction_static``
    checks), and the fraction of a type depends on the workers' GPUs only, never on what
    instances hold; so freeing claims can place the model only on a GPU that reaches its
    type's fraction afterwards. Types without a fraction (a diffusion model, GPUs of a type
    the cluster did not have) have no floor.
    """

    def prepare(self, inputs: DecisionInputs, state: CycleState) -> None:
        """Nothing to prepare: GPUStack's stages read the selection alone."""

    def wake_floor(self, query: WakeQuery) -> GpuFloor | None:
        """Each GPU type's fraction as its share floor; None under a manual selection
        (only the manual stage runs)."""
        if query.manual:
            return None
        fractions = query.estimate.mem_fraction_static
        return GpuFloor(shares={gpu_type: f for gpu_type, f in fractions.items() if f > 0})
