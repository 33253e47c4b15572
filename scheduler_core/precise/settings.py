"""The settings of ``policy: precise`` a chain carries (defaults documented in docs/policy-precise.md)."""

from __future__ import annotations

from dataclasses import dataclass

_GIB = 1 << 30
_MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class PreciseSettings:
    """Knobs of the precise rules (hashable: part of every rule's inputs).

    Attributes:
        gpu_sharing: right-size ``--mem-fraction-static`` for every request that does
            not say otherwise (the request's ``gpu_sharing`` wins).
        free_margin: bytes kept free below a GPU's reported free memory (reporting lag,
            CUDA context of the new process).
        runtime_overhead: bytes per rank the pool loses besides the weights (CUDA
            context, NCCL buffers, load-time temporaries): upstream's ``pre − avail −
            weights``, 0.5–1 GiB for the context plus 0.2–1 GiB of NCCL at tp > 1.
        headroom_ratio / headroom_min: with sharing, the pool holds the weights, the
            overhead and the KV floor plus ``max(headroom_min, ratio × (weights + floor))``.
        kv_floor_cap: the default KV floor is the model's context, capped at this.
        max_window_candidates: candidates kept per GPU count on one worker (sliding
            windows beyond it add nothing the scorer would pick).
        max_shape_candidates: distributed candidates kept per (nodes × GPUs) shape.
    """

    gpu_sharing: bool = False
    free_margin: int = 1 * _GIB
    runtime_overhead: int = 1 * _GIB
    headroom_ratio: float = 0.1
    headroom_min: int = 512 * _MIB
    kv_floor_cap: int = 8192
    max_window_candidates: int = 8
    max_shape_candidates: int = 8
