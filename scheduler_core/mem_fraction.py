"""SGLang's default ``--mem-fraction-static`` as GPUStack computes it.

This is GPUStack's ``MemFractionStaticCalculator``, itself a port of SGLang
``server_args._handle_gpu_memory_settings`` at commit ``037c3982`` (all sizes in
MiB). GPUStack evaluates it once per GPU *type*, before any GPU is chosen, from
the smallest GPU of that type and a TP guess (1 in auto mode).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler_core._units import byte_to_mib
from scheduler_core.cluster import ClusterState, sort_gpu_indexes_by_allocatable_rate
from scheduler_core.params import BackendParameters
from scheduler_core.sglang_args import DP_NAMES, GPUSTACK_TIERS, PP_NAMES, TP_NAMES
from scheduler_core.workers import WorkerView, all_gpus

#: Fraction SGLang falls back to when the GPU memory is unknown (server_args).
FALLBACK_FRACTION = 0.88

#: Reserve constants (MiB), SGLang 037c3982.
_BASE_RESERVE = 512  # constant metadata (attention backend)
_LARGE_GPU_MIB = 60 * 1024  # above this, reserve at least _LARGE_GPU_FLOOR
_LARGE_GPU_FLOOR = 10 * 1024
_STANDALONE_SPEC_RESERVE = 6 * 1024  # STANDALONE draft model + graphs
_EAGLE_SPEC_RESERVE = 2 * 1024  # other non-NGRAM draft models + graphs

#: ViT baseline for the VLM adjustment (ViT-L/14) and its knobs.
_VIT_BASE_LAYERS = 24
_VIT_BASE_HIDDEN = 1024
_VLM_BASE_FACTOR = 0.95
_VLM_SENSITIVITY = 0.1
_VLM_CLAMP = (0.8, 1.05)


@dataclass(frozen=True, slots=True)
class FractionFlags:
    """The backend flags the calculator reads (GPUStack's constructor)."""

    chunked_prefill_size: int | None
    cuda_graph_max_bs: int | None
    enable_dp_attention: bool
    speculative_algorithm: str | None
    tp_size: int
    pp_size: int
    dp_size: int
    piecewise_cuda_graph: str | None
    piecewise_cuda_graph_max_tokens: int | None

    @classmethod
    def from_parameters(cls, params: BackendParameters) -> FractionFlags:
        """Read the flags; sizes default to 1 as upstream (``or 1``); a non-integer value is unset."""
        piecewise = params.find(["enable-piecewise-cuda-graph"])
        return cls(
            chunked_prefill_size=params.find_int(["chunked-prefill-size"]),
            cuda_graph_max_bs=params.find_int(["cuda-graph-max-bs"]),
            enable_dp_attention=params.find_bool(["enable-dp-attention"]),
            speculative_algorithm=params.find(["speculative-algorithm"]),
            tp_size=params.find_int(TP_NAMES) or 1,
            pp_size=params.find_int(PP_NAMES) or 1,
            dp_size=params.find_int(DP_NAMES) or 1,
            piecewise_cuda_graph=piecewise,
            # read only when the piecewise flag has a value, as upstream
            piecewise_cuda_graph_max_tokens=(
                params.find_int(["piecewise-cuda-graph-max-tokens"]) if piecewise else None
            ),
        )


def _reserved_mib(
    flags: FractionFlags, gpu_mem: float, chunk: int, graph_bs: int, max_tp: int, max_pp: int
) -> float:
    """Step 2: memory SGLang keeps outside the static pool, in MiB."""
    reserved: float = _BASE_RESERVE
    if chunk > 0:
        reserved += max(chunk, 2048) * 1.5  # activations during large prefill
    reserved += graph_bs * 2  # cuda graphs
    reserved += max_tp * max_pp / 8 * 1024  # large parallel sizes
    if flags.enable_dp_attention:
        reserved += graph_bs * flags.dp_size * 3
        if graph_bs > 300:
            reserved += graph_bs * flags.dp_size * 1.5
    if gpu_mem > _LARGE_GPU_MIB:
        reserved = max(reserved, _LARGE_GPU_FLOOR)
    if flags.speculative_algorithm is not None:
        if flags.speculative_algorithm == "STANDALONE":
            reserved += _STANDALONE_SPEC_RESERVE
        elif flags.speculative_algorithm != "NGRAM":
            reserved += _EAGLE_SPEC_RESERVE
    if flags.piecewise_cuda_graph:
        reserved += (flags.piecewise_cuda_graph_max_tokens or 0) // 4
    return reserved


def vlm_adjusted(fraction: float, vision_config: Mapping[str, Any]) -> float:
    """Step 3: shrink the fraction for a ViT, relative to ViT-L/14 (SGLang's VLM rule)."""
    layers = vision_config.get("num_hidden_layers") or vision_config.get("depth") or _VIT_BASE_LAYERS
    hidden = vision_config.get("hidden_size")
    hidden = _VIT_BASE_HIDDEN if hidden is None else hidden
    ratio = (layers * hidden**2) / (_VIT_BASE_LAYERS * _VIT_BASE_HIDDEN**2)
    adjustment = 1.0 - _VLM_SENSITIVITY * (ratio - 1.0)
    adjustment = max(_VLM_CLAMP[0], min(_VLM_CLAMP[1], adjustment))
    return round(fraction * (_VLM_BASE_FACTOR * adjustment), 3)


def port_fraction(
    flags: FractionFlags,
    gpu_mem: float,
    *,
    is_npu: bool,
    max_tp: int,
    max_pp: int,
    vision_config: Mapping[str, Any] | None,
) -> float:
    """SGLang's default fraction for ``gpu_mem`` MiB (0 means unknown → 0.88).

    User-set ``--chunked-prefill-size``/``--cuda-graph-max-bs`` replace the tier defaults.
    """
    tier_chunk, tier_bs = GPUSTACK_TIERS.defaults(gpu_mem, is_npu, max_tp)
    chunk = tier_chunk if flags.chunked_prefill_size is None else flags.chunked_prefill_size
    graph_bs = tier_bs if flags.cuda_graph_max_bs is None else flags.cuda_graph_max_bs
    reserved = _reserved_mib(flags, gpu_mem, chunk, graph_bs, max_tp, max_pp)
    fraction = round((gpu_mem - reserved) / gpu_mem, 3) if gpu_mem > 0 else FALLBACK_FRACTION
    if vision_config is not None:
        fraction = vlm_adjusted(fraction, vision_config)
    return fraction


_VENDOR_AND_TYPE = operator.attrgetter("vendor", "type")
_TOTAL = operator.attrgetter("total")


@dataclass(frozen=True, slots=True)
class ManualSelection:
    """Manually selected GPU indexes: ``{gpu_type: {worker_name: sorted indexes}}``."""

    by_type: Mapping[str, Mapping[str, Sequence[int]]]
    gpus_per_replica: int | None
    active: bool  # the model has a gpu_selector at all (GPUStack's ``use_manual``)


class MemFractionCalculator:
    """GPUStack's ``MemFractionStaticCalculator`` for one GPU type (pure: no reuse inside)."""

    __slots__ = ("_cluster", "_flags", "_gpu_type", "_selection", "_vision_config")

    def __init__(
        self,
        flags: FractionFlags,
        selection: ManualSelection,
        gpu_type: str | None,
        cluster: ClusterState,
        vision_config: Mapping[str, Any] | None,
    ) -> None:
        self._flags = flags
        self._selection = selection
        self._gpu_type = gpu_type
        self._cluster = cluster
        self._vision_config = vision_config

    def _selected_of_type(self) -> Mapping[str, Sequence[int]]:
        return self._selection.by_type.get(self._gpu_type or "", {})

    def max_tp(self) -> int:
        """``_get_max_tp_size``: ``max(tp, most GPUs selected on one worker, gpus_per_replica)``."""
        selected = self._selected_of_type()
        candidates = [self._flags.tp_size, *(len(ix) for ix in selected.values())]
        if self._selection.gpus_per_replica:
            candidates.append(self._selection.gpus_per_replica)
        return max(candidates)

    def max_pp(self) -> int:
        """``max(pp, number of manually selected workers of this type)``."""
        return max(self._flags.pp_size, len(self._selected_of_type()))

    def inputs(self, workers: Sequence[WorkerView]) -> FractionInputs:
        """What the fraction reads from the workers: the smallest GPU and the NPU verdict.

        Without manual selection both depend on the worker list alone
        (:attr:`FractionInputs.worker_only`), so a caller may reuse them.
        """
        return FractionInputs(self.min_gpu_total(workers), self.is_npu(workers))

    @property
    def inputs_depend_on_workers_only(self) -> bool:
        """True when :meth:`inputs` reads nothing but the workers (no manual selection)."""
        return not self._selection.active

    def is_npu(self, workers: Sequence[WorkerView]) -> bool:
        """``_is_npu``: type ``cann``, or any GPU with vendor ascend / type cann."""
        if self._gpu_type == "cann":
            return True
        # Each distinct (vendor, type) pair is looked at once: thousands of GPUs, a few pairs
        # (collected at C speed).
        pairs = set(map(_VENDOR_AND_TYPE, all_gpus(workers)))
        return any(
            (vendor or "").lower() == "ascend" or (kind or "").lower() == "cann" for vendor, kind in pairs
        )

    def min_gpu_total(self, workers: Sequence[WorkerView]) -> int:
        """``_get_min_gpu_sum``: smallest GPU total (selected GPUs only under manual selection)."""
        if not self._selection.active:  # every GPU of every worker counts
            return min(map(_TOTAL, all_gpus(workers)), default=0)
        totals: list[int] = []
        for worker in workers:
            if not worker.gpus:
                continue
            selected = self._selected_indexes(worker)
            totals.extend(gpu.total for gpu in worker.gpus if selected is None or gpu.index in selected)
        return min(totals) if totals else 0

    def _selected_indexes(self, worker: WorkerView) -> Sequence[int] | None:
        selected = self._selected_of_type().get(worker.name)
        per_replica = self._selection.gpus_per_replica
        if not per_replica or selected is None:
            return selected
        allocatable = self._cluster.allocatable(worker, self._gpu_type)
        ordered = sort_gpu_indexes_by_allocatable_rate(worker, allocatable.vram, self._gpu_type)
        return [index for index in ordered if index in selected][:per_replica]

    def fraction(self, inputs: FractionInputs) -> float:
        """The fraction for this type, from :meth:`inputs` of its workers."""
        return port_fraction(
            self._flags,
            byte_to_mib(inputs.min_gpu_total),
            is_npu=inputs.is_npu,
            max_tp=self.max_tp(),
            max_pp=self.max_pp(),
            vision_config=self._vision_config,
        )


@dataclass(frozen=True, slots=True)
class FractionInputs:
    """What the calculator reads from a GPU type's workers."""

    min_gpu_total: int
    is_npu: bool
