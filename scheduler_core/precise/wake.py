"""Which freed GPUs could unblock a parked ``policy: precise`` request (its wake answer).

GPUStack's strategies skip a GPU whose allocatable share is below its type's
fraction (their own wake floor, in shares). The precise rules
have no such per-type share; what they do have is a floor in bytes
(:mod:`scheduler_core.precise.fit`): SGLang measures ``pre = free − context``
on every rank, the rank's weights ``W`` must load into it and the KV pool
``f × pre − W`` must be positive with ``f < 1``, so every GPU of a candidate
offers more than ``context + W`` (diffusion: the whole weights plus the
context on every GPU, more still). ``W`` is the fullest rank's share of the
weights; SGLang may hold fewer bytes than the checkpoint (a float32
checkpoint runs in 16 bits, half its bytes; MTP layers it does not build), so
the bound counts a quarter of an even split over the most ranks the request
could launch with: ``context + ⌈weights / (4 × ranks)⌉``. Freeing claims can
unblock the request only on a GPU that reaches it; the bound never rules out
a GPU the rules would use. Each precise strategy answers with the most ranks
*it* could launch with (one worker: its widest; several workers: nodes × GPUs
per node), so the chain's union is the bound for the most ranks of either.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler_core._schemas import ModelSpec, Worker
from scheduler_core.params import BackendParameters
from scheduler_core.precise.settings import PreciseSettings
from scheduler_core.sglang_args import DP_NAMES, PP_NAMES, TP_NAMES
from scheduler_core.wake import ANY_GPU, GpuFloor, WakeQuery

#: The fullest rank holds at least this fraction's inverse of an even split (16-bit runs of a
#: float32 checkpoint halve it; what SGLang leaves out, MTP layers, takes less than the other half).
_WEIGHT_SHARE_DIVISOR = 4


def rank_floor(query: WakeQuery, ranks: int) -> GpuFloor:
    """The floor in bytes of a placement of at most ``ranks`` ranks (≥ 1):
    ``context + ⌈weights / (4 × ranks)⌉``."""
    context = query.settings.get(PreciseSettings).sglang_context
    weights = query.estimate.weight_bytes or 0
    return GpuFloor(least_bytes=context + -(-weights // (_WEIGHT_SHARE_DIVISOR * max(ranks, 1))))


def user_world(model: ModelSpec) -> int | None:
    """The user's tp × pp when any parallel size is given (then exactly that many ranks), else None.

    Raises:
        ValueError: a parallel size that does not parse (the decision refused it).
    """
    params = BackendParameters(model.backend_parameters)
    tp, pp, dp = params.find_int(TP_NAMES), params.find_int(PP_NAMES), params.find_int(DP_NAMES)
    if tp or pp or dp:
        return max((tp or 1) * (pp or 1), 1)
    return None


def floor_for(query: WakeQuery, most_ranks: int) -> GpuFloor:
    """A precise strategy's answer when an automatic tp × pp could reach ``most_ranks``:
    no floor under a manual selection (its stage overcommits instead) or for parameters
    the decision refused."""
    if query.manual:
        return ANY_GPU
    try:
        world = user_world(query.model)
    except ValueError:
        return ANY_GPU
    return rank_floor(query, most_ranks if world is None else world)


def widest(workers: Sequence[Worker]) -> int:
    """The most GPUs one worker has (0 without workers)."""
    return max((len(worker.gpus) for worker in workers), default=0)
