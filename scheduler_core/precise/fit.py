"""The per-rank fit of ``policy: precise``: one GPU set, one tp/pp, one verdict.

SGLang's own arithmetic, rank by rank (sglang 0.5.16: ``distributed/bootstrap.py``,
``mem_cache/kv_cache_configurator.py: _profile_available_bytes``,
``model_executor/pool_configurator.py: calculate_pool_sizes``). For a set of GPUs, each
with its *free* memory (``min(allocatable by the ledger, total − reported used)``), and
the tp/pp the candidate launches with:

1. SGLang measures ``pre = free − context`` on every rank after its own CUDA context and
   NCCL are up (``context``: the ``sglang_context`` setting) and takes the minimum over
   the ranks; at tp > 1 it refuses to start when that minimum is below 0.9 × a rank's own
   (``_check_tp_memory_balance``, unless the model's env turns the check off);
2. the rank's weights ``W`` load into it (more than ``pre`` cannot load);
3. the KV pool is what stays free beyond ``(1 − f) × pre``: ``pool = f × pre − W`` with
   ``f`` SGLang's fraction (:func:`scheduler_core.precise.fraction.sizing`, the user's,
   or with GPU sharing the smallest one that holds the floor and a headroom); SGLang
   stops when it is not positive;
4. ``kv_tokens = page_floor(pool // cell)`` on the fullest rank (the minimum over PP ranks),
   at most ``--max-total-tokens`` (page-aligned again).

A placement is admitted when the pool holds the KV floor plus the ``admission_margin``
setting (0 by default): exactly what SGLang starts with the floor met. ``W`` is the
largest stage's weights and ``pre`` the smallest GPU's, so with unequal GPUs under pp > 1
the pool is the rank-by-rank minimum's lower bound. The booking per GPU is GPUStack's
``⌈f × total⌉`` capped at the GPU's free memory (SGLang takes what is free) without
sharing; with sharing ``⌈context + f × (total − context)⌉`` (the most the instance's
static part can take, should the GPU empty before it starts) plus SGLang's activation and
graph reserve, used only when it books less. Pure and cache-free; every input is an argument.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scheduler_core._units import MIB
from scheduler_core.accounting import Allocatable
from scheduler_core.cluster import MEMORY_BALANCE_RATIO
from scheduler_core.precise.facts import PreciseFacts
from scheduler_core.precise.fraction import Device, Sizing, sizing
from scheduler_core.precise.kv import kv_tokens, page_floor
from scheduler_core.reasons import Reason
from scheduler_core.workers import Gpu

#: A GPU and its free bytes.
Slot = tuple[Gpu, int]
#: What the fit reads of one GPU of a set: its total bytes, its SGLang platform, its free bytes
#: (ledger and report), and the free bytes its report alone shows (what SGLang would measure now).
Room = tuple[int, str, int, int]


def platform(gpu: Gpu) -> str:
    """The SGLang platform of a GPU: ``cuda``, ``rocm``, ``npu`` or ``other``."""
    kind = (gpu.type or "").lower()
    if kind == "cann" or (gpu.vendor or "").lower() == "ascend":
        return "npu"
    return kind if kind in ("cuda", "rocm") else "other"


def room(slot: Slot) -> Room:
    """What the fit reads of a slot."""
    gpu, free = slot
    measured = free if gpu.used is None else max(gpu.total - gpu.used, free)
    return gpu.total, platform(gpu), free, measured


def usable(gpu: Gpu, allocatable: Allocatable) -> int:
    """Rule 6: ``min(allocatable by the ledger, total − reported used)``, never below 0.

    A GPU that reports no usage is bounded by the ledger alone.
    """
    if gpu.index is None:
        return 0
    ledger = allocatable.vram.get(gpu.index, 0)
    if gpu.used is None:
        return max(ledger, 0)
    return max(min(ledger, gpu.total - gpu.used), 0)


@dataclass(frozen=True, slots=True)
class Fit:
    """A placement that holds: the launch fraction, the booking per GPU, the predicted KV tokens."""

    fraction: float | None
    bookings: tuple[int, ...]
    kv_tokens: int | None
    need: int  # free bytes per GPU the placement needs at its fraction (context, weights, floor)


@dataclass(frozen=True, slots=True)
class Miss:
    """Why a placement does not hold, with the figures the message quotes."""

    reason: Reason
    need: int  # free bytes each GPU must provide
    fraction: float | None
    usable: int  # the smallest free memory in the set


def _ceil_fraction(value: float) -> float:
    return math.ceil(value * 1000 - 1e-9) / 1000


@dataclass(frozen=True, slots=True)
class Budget:
    """What a rank needs on GPUs of one size and platform at one tp/pp (independent of usage)."""

    size: Sizing
    weights: int  # the largest PP stage's weights on one rank
    floor: int  # KV floor bytes on the fullest rank
    reserve: int  # SGLang's activation and graph reserve, bytes (without the 10 GiB floor)
    cell: int | None  # KV bytes per token on the fullest rank (None without an attention layout)


#: What a budget depends on besides the facts: the smallest GPU of the set, tp and pp.
BudgetKey = tuple[Device, int, int]
#: The budgets of one request by :data:`BudgetKey` (``budget`` with the facts bound).
Budgets = Callable[[BudgetKey], Budget]


def budget_of(facts: PreciseFacts, key: BudgetKey) -> Budget:
    """:func:`budget` with its key packed (what :data:`Budgets` computes)."""
    return budget(facts, *key)


def budget(facts: PreciseFacts, device: Device, tp: int, pp: int) -> Budget:
    """The rank's needs for GPUs like ``device`` (the smallest of a set) at ``tp``/``pp``."""
    size = sizing(device, facts.traits, facts.flags, tp, pp)
    cell = facts.cell_bytes(tp, pp)
    floor = 0 if cell is None else facts.floor_tokens * cell
    reserve = int(size.runtime_reserve_mib * MIB)
    return Budget(size, max(facts.stage_weights(tp, pp)), floor, reserve, cell)


def device_of(rooms: Sequence[Room]) -> Device:
    """The device SGLang sizes a set by: the smallest total, the first GPU's platform."""
    return Device(min(room[0] for room in rooms) / MIB, rooms[0][1])


#: A GPU set and the tp/pp run on it: what a verdict depends on besides the facts.
VerdictKey = tuple[tuple[Room, ...], int, int]
#: The verdicts of one request by :data:`VerdictKey` (:func:`verdict_of` with the facts bound).
Verdicts = Callable[[VerdictKey], Fit | Miss]


def verdict_of(facts: PreciseFacts, budgets: Budgets, key: VerdictKey) -> Fit | Miss:
    """:func:`evaluate` for a packed key, the budget taken from ``budgets``."""
    rooms, tp, pp = key
    if facts.diffusion:
        return _diffusion(facts, rooms)
    return evaluate(facts, rooms, tp, pp, budgets((device_of(rooms), tp, pp)))


def balanced_for(facts: PreciseFacts, rooms: Sequence[Room], tp: int) -> bool:
    """SGLang's TP memory-balance check on the free memory after its context: at tp > 1 the
    smallest ``free − context`` is at least 0.9 × the largest (always true at tp 1 or with the
    check turned off in the model's env), both on the free memory the ledger allows and on the
    free memory the GPUs report: what SGLang measures at start-up lies between the two (claims
    of instances not started yet, bookings above what an instance uses)."""
    if tp <= 1 or not facts.balance_check:
        return True
    context = facts.settings.sglang_context
    views = ([free for _, _, free, _ in rooms], [measured for _, _, _, measured in rooms])
    return all(min(frees) - context >= MEMORY_BALANCE_RATIO * (max(frees) - context) for frees in views)


def evaluate(
    facts: PreciseFacts, rooms: Sequence[Room], tp: int, pp: int, needs: Budget | None = None
) -> Fit | Miss:
    """The verdict for running tp×pp ranks (× dp replicas) on ``rooms``, one rank per GPU.

    ``needs`` is :func:`budget` for :func:`device_of` ``rooms`` when the caller has it.
    """
    if facts.diffusion:
        return _diffusion(facts, rooms)
    needs = needs or budget(facts, device_of(rooms), tp, pp)
    least = min(room[2] for room in rooms)
    pre = least - facts.settings.sglang_context
    fraction, launch = needs.size.fraction, needs.size.launch
    if not balanced_for(facts, rooms, tp):
        return Miss(Reason.NO_BALANCED_GPU_SET, _need(facts, needs, fraction), launch, least)
    bookings = tuple(min(math.ceil(fraction * total), free) for total, _, free, _ in rooms)
    if facts.sharing and facts.flags.user_fraction is None and pre > 0:
        shared = _shared(facts, needs, rooms, pre)
        if shared is not None and max(shared[2]) < max(bookings):
            fraction, launch, bookings = shared
    miss = _miss(facts, needs, fraction, launch, least, pre)
    if miss is not None:
        return miss
    return _with_tokens(
        facts, needs, launch, bookings, fraction * pre - needs.weights, _need(facts, needs, fraction)
    )


def _need(facts: PreciseFacts, needs: Budget, fraction: float) -> int:
    """Free bytes a GPU needs at ``fraction``: ``context + (W + floor + margin) / f``."""
    held = needs.weights + needs.floor + facts.settings.admission_margin
    return facts.settings.sglang_context + math.ceil(held / fraction) if fraction > 0 else held


def _shared(
    facts: PreciseFacts, needs: Budget, rooms: Sequence[Room], pre: int
) -> tuple[float, float, tuple[int, ...]] | None:
    """Rule 8: ``(pool fraction, launch fraction, bookings)`` of the smallest fraction whose pool
    holds the weights, the KV floor, the admission margin and a headroom (None: none fits)."""
    settings = facts.settings
    held = needs.weights + needs.floor
    headroom = max(settings.headroom_min, int(settings.headroom_ratio * held))
    launch = _ceil_fraction((held + headroom + settings.admission_margin) / pre / needs.size.factor)
    fraction = launch * needs.size.factor
    context = settings.sglang_context
    bookings = tuple(
        math.ceil(context + fraction * (total - context)) + needs.reserve for total, _, _, _ in rooms
    )
    if any(booked > free for booked, (_, _, free, _) in zip(bookings, rooms, strict=True)):
        return None
    return fraction, launch, bookings


def _miss(
    facts: PreciseFacts, needs: Budget, fraction: float, launch: float, least: int, pre: float
) -> Miss | None:
    """The first rule a placement breaks at ``fraction`` (None: it holds)."""
    need = _need(facts, needs, fraction)
    pool = fraction * pre - needs.weights
    if needs.weights > pre or pool <= 0:
        return Miss(Reason.WEIGHTS_DO_NOT_FIT, need, launch, least)
    if pool < needs.floor + facts.settings.admission_margin:
        return Miss(Reason.KV_FLOOR_NOT_MET, need, launch, least)
    return None


def _with_tokens(
    facts: PreciseFacts, needs: Budget, fraction: float, bookings: tuple[int, ...], pool: float, need: int
) -> Fit | Miss:
    """The fit with its predicted KV tokens (``pool``: the bytes SGLang's pool gets)."""
    cell = needs.cell
    tokens = None if cell is None else kv_tokens(pool, cell, needs.size.page_size)
    cap = facts.flags.max_total_tokens
    if tokens is not None and cap is not None:  # ``config_from_budget``: the user's cap, page-aligned
        tokens = min(tokens, page_floor(cap, needs.size.page_size))
    if tokens is not None and facts.min_kv_tokens is not None and tokens < facts.min_kv_tokens:
        return Miss(Reason.KV_TOKENS_BELOW_MINIMUM, need, fraction, int(pool))
    return Fit(fraction, bookings, tokens, need)


def _diffusion(facts: PreciseFacts, rooms: Sequence[Room]) -> Fit | Miss:
    """SGLang Diffusion: a full copy and its context on every GPU, which it then owns."""
    need = facts.weight_bytes + facts.settings.sglang_context
    least = min(room[2] for room in rooms)
    if need > least:
        return Miss(Reason.WEIGHTS_DO_NOT_FIT, need, None, least)
    return Fit(None, tuple(room[2] for room in rooms), None, need)
