"""Shared per-decision state and candidate types for the placement strategies.

A :class:`Selection` is the decision's ``CycleState``: everything the
strategies read (model facts, claims, fractions, the cluster view) plus the
few trackers GPUStack keeps across strategies for its messages. It is created
once per decision and never shared between decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, cast

from scheduler_core._schemas import ModelSpec
from scheduler_core.cluster import (
    ClusterState,
    Gpu,
    StageOutcomes,
    WorkerView,
    group_workers_by_gpu_type,
    ram_not_enough,
)
from scheduler_core.estimate import computed_ram_claim
from scheduler_core.events import EventCollector
from scheduler_core.mem_fraction import ManualSelection
from scheduler_core.model_facts import ModelParameters


@dataclass(frozen=True, slots=True)
class Claim:
    """A computed resource claim: per-GPU-index VRAM bytes, RAM, fraction."""

    vram: Mapping[int, int]
    ram: int | None
    vram_utilization: float | None
    estimated_vram: int | None


@dataclass(frozen=True, slots=True)
class Subordinate:
    """A follower node of a distributed candidate."""

    worker: WorkerView
    gpu_type: str | None
    gpu_indexes: tuple[int, ...]
    claim: Claim


@dataclass(frozen=True, slots=True)
class Candidate:
    """A placement candidate (GPUStack ``ModelInstanceScheduleCandidate``)."""

    worker: WorkerView
    gpu_type: str | None
    gpu_indexes: tuple[int, ...]
    claim: Claim
    overcommit: bool = False
    subordinates: tuple[Subordinate, ...] = ()


@dataclass(slots=True)
class MultiGpuTracker:
    """The "largest multi-GPU group" GPUStack remembers for its message."""

    vram: int = 0
    total_gpus: int = 0
    satisfied: int = 0


@dataclass(slots=True)
class Selection:
    """Per-decision state shared by the strategies (never global, never reused)."""

    model: ModelSpec
    categories: Sequence[str]
    model_params: ModelParameters
    cluster: ClusterState
    vram_claim: int
    ram_claim: int
    mfs_by_type: dict[str | None, float]
    gpu_count: int | None
    manual: ManualSelection
    selected_workers: tuple[str, ...]
    check_vision_tp: bool
    events: EventCollector = field(default_factory=EventCollector)
    messages: list[str] = field(default_factory=list)
    multi_gpu: MultiGpuTracker = field(default_factory=MultiGpuTracker)
    _by_type: dict[int, dict[str | None, list[WorkerView]]] = field(default_factory=dict)
    #: Per-decision memo for strategies (keys carry the strategy name and every input).
    memo: dict[tuple[object, ...], object] = field(default_factory=dict)
    _inputs_key: tuple[object, ...] | None = None
    _claims: dict[tuple[object, ...], Claim] = field(default_factory=dict)
    _stage_tables: dict[tuple[str, str | None], StageOutcomes] = field(default_factory=dict)

    def stage_outcomes(self, stage: str, gpu_type: str | None) -> StageOutcomes | None:
        """The cross-decision outcome table of ``stage`` for this decision's inputs (None: no memo)."""
        memo = self.cluster.memo
        if memo is None:
            return None
        table = self._stage_tables.get((stage, gpu_type))
        if table is None:
            table = memo.stage_outcomes((stage, self.inputs_key(), gpu_type))
            self._stage_tables[(stage, gpu_type)] = table
        return table

    def inputs_key(self) -> tuple[object, ...]:
        """Every scalar decision input a per-worker stage may read, as a hashable key.

        The model's claims and fractions, the GPU count, the divisibility rules'
        inputs and the extended-KV-cache settings (the RAM claim). Two decisions
        with equal keys evaluate an unchanged worker identically, so a
        cross-decision memo may reuse the worker's outcome under this key.
        """
        if self._inputs_key is None:
            params = self.model_params
            kv = self.model.extended_kv_cache
            self._inputs_key = (
                self.vram_claim,
                self.ram_claim,
                tuple(self.mfs_by_type.items()),
                self.gpu_count,
                self.is_diffusion,
                self.check_vision_tp,
                params.num_attention_heads,
                params.vision_num_attention_heads,
                params.vocab_size,
                (kv.enabled, kv.ram_size, kv.ram_ratio) if kv else None,
            )
        return self._inputs_key

    def workers_by_type(self, workers: Sequence[WorkerView]) -> dict[str | None, list[WorkerView]]:
        """``group_workers_by_gpu_type(workers)``, computed once per worker list per decision."""
        key = id(workers)
        grouped = self._by_type.get(key)
        if grouped is None:
            grouped = self._by_type[key] = group_workers_by_gpu_type(workers)
        return grouped

    def seed_grouping(
        self, workers: Sequence[WorkerView], grouped: dict[str | None, list[WorkerView]]
    ) -> None:
        """Record ``group_workers_by_gpu_type(workers)`` computed elsewhere (a memo)."""
        self._by_type[id(workers)] = grouped

    @property
    def is_diffusion(self) -> bool:
        """IMAGE-category models are placed by SGLang Diffusion rules."""
        return "image" in self.categories

    @property
    def distributed(self) -> bool:
        """GPUStack defaults ``distributed_inference_across_workers`` to True for SGLang."""
        flag = self.model.distributed_inference_across_workers
        return True if flag is None else flag

    def mfs(self, gpu_type: str | None) -> float | None:
        """The fraction of this GPU type (None when the type has none)."""
        return self.mfs_by_type.get(gpu_type)

    def fraction(self, gpu_type: str | None) -> float:
        """The fraction of this type, 0 when unknown (diffusion never has one)."""
        return self.mfs_by_type.get(gpu_type) or 0.0

    def effective_vram(self, gpu_type: str | None) -> float:
        """GPUStack's ``_cal_effective_vram``: the claim divided by the fraction (LLMs)."""
        fraction = self.fraction(gpu_type)
        if self.is_diffusion or fraction == 0:
            return self.vram_claim
        return self.vram_claim / fraction

    def tp_problem(self, tp: int | None) -> str | None:
        """GPUStack's ``_check_tp_size_divisibility`` for this model."""
        return tp_divisibility_problem(self.model_params, self.check_vision_tp, tp)

    def tp_divisible(self, tp: int | None) -> bool:
        """GPUStack's ``_is_tp_size_divisible``: False for 0/None or any failing rule."""
        return bool(tp) and self.tp_problem(tp) is None

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
        self,
        vram: Mapping[int, int],
        utilization: float | None,
        static_ram: int | None = None,
    ) -> Claim:
        """A :class:`Claim` with GPUStack's computed RAM for these VRAM claims.

        Equal claims within a decision are one (immutable) object: a fleet of
        equal GPUs yields thousands of candidates with a handful of distinct claims.
        """
        key = (tuple(vram.items()), utilization, static_ram)
        claim = self._claims.get(key)
        if claim is None:
            claim = self._claims[key] = Claim(
                vram=dict(vram),
                ram=computed_ram_claim(self.model, vram, static_ram),
                vram_utilization=utilization,
                estimated_vram=self.vram_claim,
            )
        return claim


_Outcome = TypeVar("_Outcome")


def worker_outcomes(
    selection: Selection,
    stage: str,
    gpu_type: str | None,
    workers: Iterable[WorkerView],
    evaluate: Callable[[WorkerView], _Outcome],
) -> list[tuple[WorkerView, _Outcome]]:
    """``evaluate(worker)`` for each worker, in order, reusing earlier decisions' outcomes.

    With a cross-decision memo, a worker's outcome is reused while the worker
    copy is the same object and no instance bound to the worker changed
    (``evaluate`` must read nothing else but :meth:`Selection.inputs_key`).
    """
    table = selection.stage_outcomes(stage, gpu_type)
    memo = selection.cluster.memo
    if table is None or memo is None:
        return [(worker, evaluate(worker)) for worker in workers]
    generations = memo.generations
    entries = table.entries
    outcomes: list[tuple[WorkerView, _Outcome]] = []
    for worker in workers:
        generation = generations.get(worker.id, 0)
        entry = entries.get(worker.id)
        if entry is not None and entry[0] is worker and entry[1] == generation:
            outcome = cast(_Outcome, entry[2])
        else:
            outcome = evaluate(worker)
            entries[worker.id] = (worker, generation, outcome)
        outcomes.append((worker, outcome))
    return outcomes


def tp_divisibility_problem(params: ModelParameters, check_vision: bool, tp: int | None) -> str | None:
    """GPUStack's ``_check_tp_size_divisibility``: the first failing rule's text.

    None when ``tp`` is 0/None or every known size divides evenly. KV heads are
    not checked (upstream does not).
    """
    if not tp:
        return None
    heads = params.num_attention_heads
    if heads and heads % tp != 0:
        return f"Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp})."
    vision_heads = params.vision_num_attention_heads
    if check_vision and vision_heads and vision_heads % tp != 0:
        return (
            f"Total number of vision attention heads ({vision_heads}) must be divisible "
            f"by tensor parallel size ({tp})."
        )
    vocab = params.vocab_size
    if vocab and vocab % tp != 0:
        return f"Vocabulary size ({vocab}) must be divisible by tensor parallel size ({tp})."
    return None


def worker_shape(selection: Selection, worker: WorkerView, gpu_type: str | None) -> tuple[object, ...]:
    """What a per-worker stage reads that varies between workers of one GPU type.

    Workers with equal GPUs (index, type, total, free) and the same RAM verdict
    get the same stage outcome, so a homogeneous fleet is evaluated once per
    shape; everything else a stage reads is constant within a decision.
    """
    allocatable = selection.cluster.allocatable(worker, gpu_type)
    free = allocatable.vram
    shape = tuple(
        (g.index, g.type, g.total, free.get(g.index, 0) if g.index is not None else 0) for g in worker.gpus
    )
    return (gpu_type, ram_not_enough(selection.ram_claim, allocatable), shape)


def gpu_rate(allocatable: Mapping[int, int], gpu: Gpu) -> float:
    """Allocatable share of a GPU (0 for a GPU without memory or index)."""
    if not gpu.total or gpu.index is None:
        return 0.0
    return allocatable.get(gpu.index, 0) / gpu.total


class Strategy(Protocol):
    """A placement strategy: one stage of GPUStack's selector chain."""

    name: str

    def skip(self, selection: Selection) -> bool:
        """True when GPUStack's ``should_skip_candidate_func`` skips this stage."""
        ...

    def __call__(self, selection: Selection, workers: Sequence[WorkerView]) -> list[Candidate]:
        """Candidates for the (already filtered, GPU-count-sorted) workers."""
        ...
