"""Which freed GPUs could unblock a parked ``policy: precise`` request (its wake answer).

GPUStack's strategies skip a GPU whose allocatable share is below its type's
fraction (their own wake floor, in shares). The precise rules
have no such per-type share; what they do have is a floor in bytes
(:mod:`scheduler_core.precise.fit`): SGLang measures ``pre = free − context``
on every rank, the rank's weights ``W`` must load into it and the KV pool
``f × pre − W`` must hold the KV floor (plus the admission margin) with
``f ≤ 1`` unless the user asks for more, so every GPU of a candidate offers at
least ``context + W + KV floor`` (diffusion: the whole weights plus the
context on every GPU).

With the decision's :class:`~scheduler_core.precise.facts.PreciseFacts` (the
``state`` of the :class:`~scheduler_core.wake.WakeQuery`, what the strategies
prepared) that bound is computed exactly as the fit computes ``W`` and the KV
floor, for each tp × pp the strategy could launch with, and the least of them is
the answer (:func:`layout_floor`): for a 7B at tp 1, the whole 15.2 GB of
weights, not a quarter (issue 22: a quarter let a GPU of 4.5 GB beside a
20 GiB instance wake the request again and again). Without the facts (a caller
that has only the result), ``W`` is bounded from the estimate: SGLang may hold
fewer bytes than the checkpoint (a float32 checkpoint runs in 16 bits, half
its bytes; MTP layers it does not build), so the bound counts a quarter of an
even split over the most ranks the request could launch with:
``context + ⌈weights / (4 × ranks)⌉``. Either bound never rules out a GPU the
rules would use. Each precise strategy answers for the layouts *it* could
launch with (one worker: tp up to its widest; several workers: nodes × GPUs
per node), so the chain's union is the bound for either.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

from scheduler_core._schemas import ModelSpec, Worker
from scheduler_core.params import BackendParameters
from scheduler_core.precise.facts import PreciseFacts
from scheduler_core.precise.settings import PreciseSettings
from scheduler_core.sglang_args import DP_NAMES, PP_NAMES, TP_NAMES
from scheduler_core.wake import ANY_GPU, GpuFloor, WakeQuery

#: A tp × pp a strategy may launch with.
Layout = tuple[int, int]

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


def floor_for(query: WakeQuery, most_ranks: int, automatic: Sequence[Layout] = ()) -> GpuFloor:
    """A precise strategy's answer when an automatic tp × pp could reach ``most_ranks``:
    no floor under a manual selection (its stage overcommits instead) or for parameters
    the decision refused.

    With the decision's :class:`PreciseFacts` (``query.state``), the least any of the
    strategy's layouts needs on each of its GPUs (:func:`layout_floor`): the user's tp/pp,
    else each of ``automatic``. Without them (or with no automatic layout),
    :func:`rank_floor`.
    """
    if query.manual:
        return ANY_GPU
    try:
        world = user_world(query.model)
    except ValueError:
        return ANY_GPU
    facts = _prepared(query)
    if facts is not None:
        layouts = tuple(automatic) if world is None else ((facts.tp or 1, facts.pp or 1),)
        if layouts:
            return GpuFloor(least_bytes=least_floor(facts, layouts))
    return rank_floor(query, most_ranks if world is None else world)


@functools.lru_cache(maxsize=256)
def least_floor(facts: PreciseFacts, layouts: tuple[Layout, ...]) -> int:
    """The least :func:`layout_floor` over ``layouts`` (≥ 1 of them).

    Pure; cached by value, as requests for one model share their facts (64 automatic
    layouts of a weights anatomy cost about 8 ms on 8-GPU workers, a cache hit nothing).
    """
    return min(layout_floor(facts, tp, pp) for tp, pp in layouts)


def layout_floor(facts: PreciseFacts, tp: int, pp: int) -> int:
    """The free bytes every GPU of a tp × pp placement needs at least (:mod:`.fit`'s rules).

    SGLang's ``pre = free − context`` must hold the fullest rank's weights ``W`` and its pool
    ``f × pre − W`` the KV floor plus the admission margin; ``f`` is below 1 unless the user
    asks for more (GPUStack's and the heuristic's fractions are, and so is a shared one,
    whose booking fits the GPU): ``context + max(W, ⌈(W + floor + margin) / max(f, 1)⌉)``.
    A diffusion model needs its whole weights and the context on every GPU.
    """
    context = facts.settings.sglang_context
    if facts.diffusion:
        return facts.weight_bytes + context
    weights = max(facts.stage_weights(tp, pp))
    cell = facts.cell_bytes(tp, pp)
    held = weights + (0 if cell is None else facts.floor_tokens * cell) + facts.settings.admission_margin
    most = max(facts.flags.user_fraction or 1.0, 1.0)
    return context + max(weights, math.ceil(held / most))


def _prepared(query: WakeQuery) -> PreciseFacts | None:
    """The decision's precise facts, when the query carries them."""
    if query.state is None or PreciseFacts not in query.state.kinds():
        return None
    return query.state.read(PreciseFacts)


def widest(workers: Sequence[Worker]) -> int:
    """The most GPUs one worker has (0 without workers)."""
    return max((len(worker.gpus) for worker in workers), default=0)
