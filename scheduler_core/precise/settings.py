"""The settings of ``policy: precise`` a chain carries (defaults documented in docs/policy-precise.md)."""

from __future__ import annotations

from dataclasses import dataclass

_MIB = 1 << 20

#: SGLang's own memory on each GPU before it measures what is free: the CUDA context of its
#: process and, at tp > 1, NCCL's buffers (``distributed/bootstrap.py`` measures free memory
#: after both are up). No GPU was at hand to measure it; 0.5 GiB is the middle of the
#: 0–1 GiB range the decisions are checked over (docs/policy-precise.md, "SGLang's context").
DEFAULT_SGLANG_CONTEXT = 512 * _MIB


@dataclass(frozen=True, slots=True)
class PreciseSettings:
    """Knobs of the precise rules (hashable: part of every rule's inputs).

    Attributes:
        gpu_sharing: right-size ``--mem-fraction-static`` for every request that does
            not say otherwise (the request's ``gpu_sharing`` wins).
        sglang_context: bytes per GPU SGLang's process holds before it measures free memory
            (CUDA context, NCCL): the prediction's ``free − context``.
        admission_margin: bytes the predicted KV pool must hold beyond the KV floor for a
            placement to be admitted (and, with sharing, that the fraction adds). A safety
            margin on admission only: predictions (``kv_tokens``) never include it. 0 by
            default, so nothing SGLang starts with the floor met is refused.
        headroom_ratio / headroom_min: with sharing, the pool holds the weights and the KV
            floor plus ``max(headroom_min, ratio × (weights + floor))``.
        kv_floor_cap: the default KV floor is the model's context, capped at this.
        max_window_candidates: candidates kept per GPU count on one worker (sliding
            windows beyond it add nothing the scorer would pick).
        max_shape_candidates: distributed candidates kept per (nodes × GPUs) shape.
    """

    gpu_sharing: bool = False
    sglang_context: int = DEFAULT_SGLANG_CONTEXT
    admission_margin: int = 0
    headroom_ratio: float = 0.1
    headroom_min: int = 512 * _MIB
    kv_floor_cap: int = 8192
    max_window_candidates: int = 8
    max_shape_candidates: int = 8
