"""The per-rank fit of ``policy: precise``: one GPU set, one tp/pp, one verdict.

For a set of GPUs (each with its *usable* memory) and the tp/pp the candidate
launches with:

1. the fraction ``f`` is SGLang's current default for these GPUs and tp/pp
   (:func:`scheduler_core.precise.fraction.sizing`), or the user's; with GPU
   sharing, the smallest fraction (3 decimals, rounded up) that holds, with a
   headroom, both right-hand sides of rule 2 below;
2. rule 2 as issue 12 states it, on every chosen GPU (dp replicas each hold a
   full copy; ``reserve`` is SGLang's activation and graph reserve, without the
   10 GiB floor of the default fraction):

       w_rank + reserve + floor·cell ≤ f × total_g

   and, because SGLang's static pool holds the weights and the KV cache while its
   activations live *beside* the pool, the physical form on usable memory:

       w_rank + overhead + floor·cell ≤ f × usable_min              (the pool)
       w_rank + overhead + floor·cell + reserve ≤ usable_g           (every GPU)

3. the booked memory per GPU is ``⌈f × total_g⌉`` without sharing (GPUStack's
   claim; SGLang's reserve is the rest of the GPU, so the share must be usable:
   ``⌈f × total_g⌉ ≤ usable_g``) and ``⌈f × total_g⌉ + reserve`` with sharing
   (the reserve no longer comes for free), which must be ``≤ usable_g``;
4. the predicted KV capacity is SGLang's pool arithmetic with the free memory at
   start taken as the smallest usable memory of the set:
   ``page_floor((f × usable_min − w_rank − overhead) // cell)``.

``f`` is the fraction SGLang sizes the pool with (the launch value times the ROCm
aiter factor). ``usable_g = min(allocatable by the ledger, total − reported used −
margin)``. Pure and cache-free; every input is an argument.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scheduler_core._units import MIB
from scheduler_core.accounting import Allocatable
from scheduler_core.precise.facts import PreciseFacts
from scheduler_core.precise.fraction import Device, Sizing, sizing
from scheduler_core.precise.kv import kv_tokens
from scheduler_core.reasons import Reason
from scheduler_core.workers import Gpu

#: A GPU and its usable bytes.
Slot = tuple[Gpu, int]
#: What the fit reads of one GPU of a set: its total bytes, its SGLang platform, its usable bytes.
Room = tuple[int, str, int]


def platform(gpu: Gpu) -> str:
    """The SGLang platform of a GPU: ``cuda``, ``rocm``, ``npu`` or ``other``."""
    kind = (gpu.type or "").lower()
    if kind == "cann" or (gpu.vendor or "").lower() == "ascend":
        return "npu"
    return kind if kind in ("cuda", "rocm") else "other"


def room(slot: Slot) -> Room:
    """What the fit reads of a slot."""
    gpu, free = slot
    return gpu.total, platform(gpu), free


def usable(gpu: Gpu, allocatable: Allocatable, margin: int) -> int:
    """Rule 6: ``min(allocatable by the ledger, total − reported used − margin)``, never below 0.

    A GPU that reports no usage is bounded by the ledger alone.
    """
    if gpu.index is None:
        return 0
    ledger = allocatable.vram.get(gpu.index, 0)
    if gpu.used is None:
        return max(ledger, 0)
    return max(min(ledger, gpu.total - gpu.used - margin), 0)


@dataclass(frozen=True, slots=True)
class Fit:
    """A placement that holds: the launch fraction, the booking per GPU, the predicted KV tokens."""

    fraction: float | None
    bookings: tuple[int, ...]
    kv_tokens: int | None
    need: int  # bytes per rank: weights + overhead + KV floor (+ reserve for the GPU check)


@dataclass(frozen=True, slots=True)
class Miss:
    """Why a placement does not hold, with the figures the message quotes."""

    reason: Reason
    need: int  # bytes each GPU must provide
    fraction: float | None
    usable: int  # the smallest usable memory in the set
    #: ``f × total`` of the smallest GPU when rule 2's inequality on the pool is what failed.
    pool: int | None = None


def _ceil_fraction(value: float) -> float:
    return math.ceil(value * 1000 - 1e-9) / 1000


def rank_weights(facts: PreciseFacts, tp: int, pp: int) -> int:
    """Weight bytes on one rank: ``⌈weights / (tp·pp)⌉`` (a full copy per GPU for diffusion)."""
    if facts.diffusion:
        return facts.weight_bytes
    return -(-facts.weight_bytes // max(tp * pp, 1))


@dataclass(frozen=True, slots=True)
class Budget:
    """What a rank needs on GPUs of one size and platform at one tp/pp (independent of usage)."""

    size: Sizing
    weights: int  # per rank
    static: int  # weights + overhead + KV floor: what the pool must hold of usable memory
    reserve: int  # SGLang's activation and graph reserve, bytes (without the 10 GiB floor)
    rule_two: int  # weights + reserve + KV floor: what ``f × total`` must hold (issue 12, rule 2)
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
    weights = rank_weights(facts, tp, pp)
    cell = facts.cell_bytes(tp, pp)
    floor = 0 if cell is None else facts.floor_tokens * cell
    static = weights + facts.settings.runtime_overhead + floor
    reserve = int(size.runtime_reserve_mib * MIB)
    return Budget(size, weights, static, reserve, weights + reserve + floor, cell)


def device_of(rooms: Sequence[Room]) -> Device:
    """The device SGLang sizes a set by: the smallest total, the first GPU's platform."""
    return Device(min(total for total, _, _ in rooms) / MIB, rooms[0][1])


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


def evaluate(
    facts: PreciseFacts, rooms: Sequence[Room], tp: int, pp: int, needs: Budget | None = None
) -> Fit | Miss:
    """The verdict for running tp×pp ranks (× dp replicas) on ``rooms``, one rank per GPU.

    ``needs`` is :func:`budget` for :func:`device_of` ``rooms`` when the caller has it.
    """
    if facts.diffusion:
        return _diffusion(facts, rooms)
    needs = needs or budget(facts, device_of(rooms), tp, pp)
    least = min(free for _, _, free in rooms)
    smallest = min(total for total, _, _ in rooms)
    fraction, launch = needs.size.fraction, needs.size.launch
    bookings = tuple(math.ceil(fraction * total) for total, _, _ in rooms)
    if facts.sharing and facts.flags.user_fraction is None and least > 0:
        shared = _shared(facts, needs, rooms, least, smallest)
        if max(shared[2]) < max(bookings):  # sharing never books more than the default fraction
            fraction, launch, bookings = shared
    miss = _miss(facts, needs, rooms, fraction, launch, bookings, least, smallest)
    if miss is not None:
        return miss
    budget_bytes = fraction * least - needs.weights - facts.settings.runtime_overhead
    return _with_tokens(facts, needs, launch, bookings, budget_bytes)


def _shared(
    facts: PreciseFacts, needs: Budget, rooms: Sequence[Room], least: int, smallest: int
) -> tuple[float, float, tuple[int, ...]]:
    """Rule 8: ``(pool fraction, launch fraction, bookings)`` of the smallest fraction that holds
    the weights, the reserve, the KV floor and a headroom (rule 2 on totals) and the weights, the
    overhead, the KV floor and the headroom (the pool on usable memory)."""
    settings = facts.settings
    held = needs.static - settings.runtime_overhead  # weights and KV floor
    headroom = max(settings.headroom_min, int(settings.headroom_ratio * held))
    wanted = max((needs.static + headroom) / least, (needs.rule_two + headroom) / smallest)
    launch = _ceil_fraction(wanted / needs.size.factor)
    fraction = launch * needs.size.factor
    return fraction, launch, tuple(math.ceil(fraction * total) + needs.reserve for total, _, _ in rooms)


def _miss(
    facts: PreciseFacts,
    needs: Budget,
    rooms: Sequence[Room],
    fraction: float,
    launch: float,
    bookings: tuple[int, ...],
    least: int,
    smallest: int,
) -> Miss | None:
    """The first rule a placement breaks at ``fraction`` (None: it holds)."""
    static, reserve = needs.static, needs.reserve
    if needs.weights + facts.settings.runtime_overhead > fraction * least:
        return Miss(Reason.WEIGHTS_DO_NOT_FIT, static + reserve, launch, least)
    if static > fraction * least or any(static + reserve > free for _, _, free in rooms):
        return Miss(Reason.KV_FLOOR_NOT_MET, static + reserve, launch, least)
    if needs.rule_two > fraction * smallest:
        return Miss(Reason.KV_FLOOR_NOT_MET, needs.rule_two, launch, least, int(fraction * smallest))
    if any(booked > free for booked, (_, _, free) in zip(bookings, rooms, strict=True)):
        return Miss(Reason.INSUFFICIENT_VRAM, max(bookings), launch, least)
    return None


def _with_tokens(
    facts: PreciseFacts, needs: Budget, fraction: float, bookings: tuple[int, ...], budget: float
) -> Fit | Miss:
    """The fit with its predicted KV tokens (``budget``: the pool bytes left for the KV cache)."""
    need = needs.static + needs.reserve
    cell = needs.cell
    tokens = None if cell is None else kv_tokens(budget, cell, needs.size.page_size)
    if tokens is not None and facts.min_kv_tokens is not None and tokens < facts.min_kv_tokens:
        return Miss(Reason.KV_TOKENS_BELOW_MINIMUM, need, fraction, int(budget))
    return Fit(fraction, bookings, tokens, need)


def _diffusion(facts: PreciseFacts, rooms: Sequence[Room]) -> Fit | Miss:
    """SGLang Diffusion: a full copy and the overhead on every GPU, which it then owns."""
    need = facts.weight_bytes + facts.settings.runtime_overhead
    least = min(free for _, _, free in rooms)
    if need > least:
        return Miss(Reason.WEIGHTS_DO_NOT_FIT, need, None, least)
    return Fit(None, tuple(free for _, _, free in rooms), None, need)
