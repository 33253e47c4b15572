"""One decision's inputs, complete before any strategy runs, and what the strategies report.

:class:`Selection` is the decision's ``CycleState``: the model's facts, the
claims, the fraction per GPU type, the GPU count, the manual selection, the
cluster view and the filtered workers grouped by GPU type, and the facts each
policy's strategies prepared for themselves (``state``). It is built whole
by the orchestrator and never changes. :class:`DecisionLog` is the one
mutable part: the events and GPUStack messages the strategies record, and
the "largest multi-GPU group" GPUStack remembers across workers for its text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduler_core._schemas import ModelSpec
from scheduler_core.arguments import TpRule
from scheduler_core.caching import StageRunner
from scheduler_core.candidates import Claim
from scheduler_core.cluster import ClusterState
from scheduler_core.cycle import CycleState
from scheduler_core.estimate import RamClaimRule
from scheduler_core.events import EventCollector
from scheduler_core.mem_fraction import ManualSelection
from scheduler_core.model_config import ModelParameters
from scheduler_core.workers import WorkerView


@dataclass(slots=True)
class MultiGpuTracker:
    """The "largest multi-GPU group" GPUStack remembers for its message."""

    vram: int = 0
    total_gpus: int = 0
    satisfied: int = 0


@dataclass(slots=True)
class DecisionLog:
    """Events and messages recorded while the strategies run (one per decision)."""

    events: EventCollector = field(default_factory=EventCollector)
    messages: list[str] = field(default_factory=list)
    multi_gpu: MultiGpuTracker = field(default_factory=MultiGpuTracker)


@dataclass(frozen=True, slots=True)
class Selection:
    """Everything the strategies read for one decision (never global, never reused).

    Attributes:
        model: the model row.
        categories: the model's categories (``image`` when a diffusers folder says so).
        model_params: hyperparameters from the config.
        cluster: instances and allocatable memory per worker.
        vram_claim / ram_claim: the model's estimate.
        mfs_by_type: ``--mem-fraction-static`` per GPU type (``"*"``: GPUStack's fallback 0).
        gpu_count: GPUs per replica (None: any).
        manual: the manual GPU selection.
        selected_workers: workers named by the manual selection.
        tp_rule: the tensor-parallel divisibility checks.
        ordered: the filtered workers, sorted by GPU count (most first, stable).
        workers_by_type: ``ordered`` grouped by GPU type (copies holding that type's GPUs).
        runner: maps per-worker rules over workers.
        state: the facts the chain's strategies prepared, by type (:mod:`scheduler_core.cycle`).
        log: what the strategies record.
    """

    model: ModelSpec
    categories: Sequence[str]
    model_params: ModelParameters
    cluster: ClusterState
    vram_claim: int
    ram_claim: int
    mfs_by_type: Mapping[str | None, float]
    gpu_count: int | None
    manual: ManualSelection
    selected_workers: tuple[str, ...]
    tp_rule: TpRule
    ordered: Sequence[WorkerView]
    workers_by_type: Mapping[str | None, Sequence[WorkerView]]
    runner: StageRunner
    state: CycleState = field(default_factory=CycleState)
    log: DecisionLog = field(default_factory=DecisionLog)

    @property
    def is_diffusion(self) -> bool:
        """IMAGE-category models are placed by SGLang Diffusion rules."""
        return "image" in self.categories

    @property
    def distributed(self) -> bool:
        """GPUStack defaults ``distributed_inference_across_workers`` to True for SGLang."""
        flag = self.model.distributed_inference_across_workers
        return True if flag is None else flag

    @property
    def ram_rule(self) -> RamClaimRule:
        """How a claim's RAM follows from its VRAM (extended KV cache)."""
        return RamClaimRule.of(self.model)

    def mfs(self, gpu_type: str | None) -> float | None:
        """The fraction of this GPU type (None when the type has none)."""
        return self.mfs_by_type.get(gpu_type)

    def fraction(self, gpu_type: str | None) -> float:
        """The fraction of this type, 0 when unknown (diffusion never has one)."""
        return self.mfs_by_type.get(gpu_type) or 0.0

    def vram_claims(
        self,
        worker: WorkerView,
        indexes: Sequence[int],
        utilization: float,
        request_vram: int | None = None,
    ) -> dict[int, int]:
        """GPUStack's ``_get_worker_resource_claim`` for the worker's GPUs in ``indexes``.

        LLMs claim ``int(total × utilization)``; without a fraction the request is
        split evenly (``int(request / n)``), or nothing when there is no request.
        """
        wanted = set(indexes)
        claims: dict[int, int] = {}
        for gpu in worker.gpus:
            if gpu.index is None or gpu.index not in wanted:
                continue
            if utilization > 0:
                claims[gpu.index] = int(gpu.total * utilization)
            elif request_vram is not None:
                claims[gpu.index] = int(request_vram / len(indexes))
            else:
                claims[gpu.index] = 0
        return claims

    def claim(
        self, vram: Mapping[int, int], utilization: float | None, static_ram: int | None = None
    ) -> Claim:
        """A :class:`Claim` with GPUStack's computed RAM for these VRAM claims."""
        return Claim(
            vram=dict(vram),
            ram=self.ram_rule.ram_for(vram, static_ram),
            vram_utilization=utilization,
            estimated_vram=self.vram_claim,
        )


def effective_vram(vram_claim: int, fraction: float, diffusion: bool) -> float:
    """GPUStack's ``_cal_effective_vram``: what the GPUs must provide in total for the claim."""
    if diffusion or fraction == 0:
        return vram_claim
    return vram_claim / fraction
