"""Placement candidates and their resource claims: the types every layer shares.

A bottom-layer module: strategies produce these, scoring, launch planning and
rendering read them, and none of those needs to import the strategies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from scheduler_core.workers import WorkerView


@dataclass(frozen=True, slots=True)
class Claim:
    """A computed resource claim (GPUStack ``ComputedResourceClaim``).

    Attributes:
        vram: bytes per GPU index.
        ram: RAM bytes (extended KV cache), None when the model claims none.
        vram_utilization: the ``--mem-fraction-static`` booked, None for a
            distributed leader (GPUStack leaves it unset there).
        estimated_vram: the model's whole VRAM estimate.
    """

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


class Candidate(NamedTuple):
    """A placement candidate (GPUStack ``ModelInstanceScheduleCandidate``).

    A named tuple: immutable and cheap to build (a large cluster yields
    thousands of one-GPU candidates per decision). ``kv_tokens`` is the
    KV-cache capacity ``policy: precise`` predicts (None under ``gpustack``).
    """

    worker: WorkerView
    gpu_type: str | None
    gpu_indexes: tuple[int, ...]
    claim: Claim
    overcommit: bool = False
    subordinates: tuple[Subordinate, ...] = ()
    kv_tokens: int | None = None
