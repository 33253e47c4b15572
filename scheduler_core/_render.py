"""Conversion of the core's internal decision objects into Contract 1 result models.

The internal objects are already well-typed, so the result models are built
with ``model_construct`` (no re-validation): a 2,000-worker cluster can yield
16,000 single-GPU candidates, and validating each would dominate the decision.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

from scheduler_core._schemas import (
    CandidateOut,
    ClaimOut,
    EstimateOut,
    EventOut,
    SubordinateOut,
)
from scheduler_core.estimate import ModelFacts
from scheduler_core.events import Event
from scheduler_core.strategies._base import Candidate, Claim, Selection, Subordinate

_M = TypeVar("_M", bound=BaseModel)


def _construct(cls: type[_M], **fields: Any) -> _M:
    """``cls.model_construct(**fields)`` for callers that pass *every* field.

    Same object state as pydantic's ``model_construct`` (field dict, fields-set,
    no extra, no private), without its per-call default/alias handling, which
    costs ~3 µs per object; ``tests/engine/test_render.py`` pins the equivalence.
    """
    instance = cls.__new__(cls)
    object.__setattr__(instance, "__dict__", fields)
    object.__setattr__(instance, "__pydantic_fields_set__", set(fields))
    object.__setattr__(instance, "__pydantic_extra__", None)
    object.__setattr__(instance, "__pydantic_private__", None)
    return instance


#: Memo of rendered claims keyed by their content.
ClaimMemo = dict[tuple[object, ...], ClaimOut]


def claim_out(claim: Claim, memo: ClaimMemo | None = None) -> ClaimOut:
    """A claim with GPU indexes as string keys (JSON object keys).

    Equal claims (the same GPU size and index on many workers) share one
    immutable output object when a ``memo`` is passed.
    """
    if memo is not None:
        # Strategies share one Claim object between equal candidates: try identity first.
        shared = memo.get((id(claim),))
        if shared is not None:
            return shared
        key = (tuple(claim.vram.items()), claim.ram, claim.vram_utilization, claim.estimated_vram)
        shared = memo.get(key)
        if shared is None:
            shared = memo[key] = claim_out(claim)
        memo[(id(claim),)] = shared  # the claim outlives the memo: one decision
        return shared
    return _construct(
        ClaimOut,
        vram={str(index): amount for index, amount in claim.vram.items()},
        ram=claim.ram,
        vram_utilization=claim.vram_utilization,
        estimated_vram=claim.estimated_vram,
    )


def _subordinate_out(sub: Subordinate) -> SubordinateOut:
    return _construct(
        SubordinateOut,
        worker_id=sub.worker.id,
        worker_name=sub.worker.name,
        worker_ip=sub.worker.ip,
        worker_ifname=sub.worker.ifname,
        gpu_type=sub.gpu_type,
        gpu_indexes=list(sub.gpu_indexes),
        total_gpus=len(sub.gpu_indexes),
        computed_resource_claim=claim_out(sub.claim),
    )


def candidate_out(candidate: Candidate, score: float, memo: ClaimMemo | None = None) -> CandidateOut:
    """One candidate with its placement score (``memo`` shares equal claim objects)."""
    subordinates = [_subordinate_out(sub) for sub in candidate.subordinates]
    return _construct(
        CandidateOut,
        worker_id=candidate.worker.id,
        worker_name=candidate.worker.name,
        worker_ip=candidate.worker.ip,
        gpu_type=candidate.gpu_type,
        gpu_indexes=list(candidate.gpu_indexes),
        computed_resource_claim=claim_out(candidate.claim, memo),
        overcommit=candidate.overcommit,
        score=score,
        subordinate_workers=subordinates or None,
    )


def event_out(event: Event) -> EventOut:
    """A recorded event."""
    return EventOut.model_construct(
        level=event.level.value, action=event.action, message=event.message, reason=event.reason
    )


def fraction_summary(fractions: dict[str | None, float]) -> dict[str, float]:
    """Fractions keyed by real GPU types only (drops ``"*"`` and the GPU-less ``None``)."""
    return {t: f for t, f in fractions.items() if t is not None and t != "*"}


def estimate_out(selection: Selection, facts: ModelFacts) -> EstimateOut:
    """What the model needs, as decided for this request."""
    return EstimateOut.model_construct(
        vram_bytes=selection.vram_claim,
        ram_bytes=selection.ram_claim,
        mem_fraction_static=fraction_summary(selection.mfs_by_type),
        weight_bytes=facts.weight_bytes,
        weight_source=facts.weight_source,
    )
