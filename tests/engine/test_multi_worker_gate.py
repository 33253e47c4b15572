"""Stage 4's gate (``multi_worker.py: _gate_passes``) against GPUStack's grouping written out.

GPUStack (``sglang_resource_fit_selector.py``) builds one slot per GPU of every
worker of the type with enough RAM (``group_worker_gpu_by_memory``: an index, a
size and allocatable VRAM above 0), sorts the slots by allocatable VRAM and cuts
them greedily (a slot joins the current group while the group's first slot has
at least 0.9 × its VRAM), then asks whether some group of two slots or more has
every GPU at the fraction or above and the same GPU count on each of its
workers. The stage cuts the distinct amounts instead and counts per worker at C
speed; this compares the two on clusters built to hit ties, the 0.9 boundary,
workers short of RAM and GPUs below the fraction.
"""

from __future__ import annotations

from collections import Counter
from itertools import chain

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core.accounting import Allocatable
from scheduler_core.cluster import MEMORY_BALANCE_RATIO
from scheduler_core.memo import SlotKey, SnapshotMemo
from scheduler_core.strategies import multi_worker
from scheduler_core.workers import Gpu

#: Amounts that meet at the 0.9 boundary (81 = 0.9 × 90, 90 = 0.9 × 100) and fall beside it.
_AMOUNTS = st.sampled_from([0, 1, 9, 10, 72, 80, 81, 82, 89, 90, 91, 99, 100])
_TOTALS = st.sampled_from([0, 90, 100, 120])


@st.composite
def _workers(draw: st.DrawFn) -> list[tuple[tuple[Gpu, ...], Allocatable]]:
    workers = []
    for _ in range(draw(st.integers(min_value=0, max_value=7))):
        count = draw(st.integers(min_value=1, max_value=8))
        gpus = tuple(
            Gpu("cuda", None if draw(st.integers(0, 15)) == 0 else position, draw(_TOTALS))
            for position in range(count)
        )
        vram = {gpu.index: draw(_AMOUNTS) for gpu in gpus if gpu.index is not None}
        workers.append((gpus, Allocatable(draw(st.sampled_from([0, 10, 64])), vram)))
    return workers


def _gpustack_groups(
    workers: list[tuple[tuple[Gpu, ...], Allocatable]], ram_claim: int
) -> list[list[tuple[int, Gpu, int]]]:
    """``group_worker_gpu_by_memory`` as GPUStack runs it, slot by slot: (worker, GPU, VRAM)."""
    slots = []
    for position, (gpus, free) in enumerate(workers):
        if ram_claim > 0 and free.ram < ram_claim:
            continue
        for gpu in gpus:
            amount = free.vram.get(gpu.index, 0) if gpu.index is not None else 0
            if gpu.index is not None and gpu.total and amount > 0:
                slots.append((position, gpu, amount))
    groups: list[list[tuple[int, Gpu, int]]] = []
    for slot in sorted(slots, key=lambda slot: slot[2]):
        if groups and groups[-1][0][2] >= slot[2] * MEMORY_BALANCE_RATIO:
            groups[-1].append(slot)
        else:
            groups.append([slot])
    return groups


def _gpustack_gate(
    workers: list[tuple[tuple[Gpu, ...], Allocatable]], ram_claim: int, fraction: float, diffusion: bool
) -> bool:
    """The gate as GPUStack runs it over its groups."""
    for group in _gpustack_groups(workers, ram_claim):
        if len(group) <= 1:
            continue
        if not diffusion and any(amount / gpu.total < fraction for _, gpu, amount in group):
            continue
        per_worker: dict[int, int] = {}
        for position, _, _ in group:
            per_worker[position] = per_worker.get(position, 0) + 1
        if len(set(per_worker.values())) == 1:
            return True
    return False


def _stage_gate(
    workers: list[tuple[tuple[Gpu, ...], Allocatable]], ram_claim: int, fraction: float, diffusion: bool
) -> bool:
    inputs = multi_worker._GateInputs(ram_claim, fraction, diffusion)
    slots = [multi_worker._worker_slots(inputs, gpus, free) for gpus, free in workers]
    held = [worker.amounts for worker in slots if worker.amounts]
    fresh = multi_worker._gate_passes(
        held, Counter(chain.from_iterable(held)), Counter(chain.from_iterable(w.below for w in slots))
    )
    # As a decider with a memo counts them: the slots of a decision before, where the
    # first worker was short of RAM, updated by the one worker that changed.
    memo = SnapshotMemo()
    for values in ([multi_worker._NO_SLOTS, *slots[1:]], slots):
        amounts = memo.tally(SlotKey("amounts"), values, multi_worker._AMOUNTS)
        below = memo.tally(SlotKey("below"), values, multi_worker._BELOW)
    assert multi_worker._gate_passes(held, amounts, below) == fresh
    return fresh


@settings(max_examples=2000, deadline=None)
@given(
    workers=_workers(),
    ram_claim=st.sampled_from([0, 32]),
    fraction=st.sampled_from([0.0, 0.8, 0.9, 0.91]),
    diffusion=st.booleans(),
)
def test_the_gate_agrees_with_gpustacks_grouping(
    workers: list[tuple[tuple[Gpu, ...], Allocatable]], ram_claim: int, fraction: float, diffusion: bool
) -> None:
    assert _stage_gate(workers, ram_claim, fraction, diffusion) == _gpustack_gate(
        workers, ram_claim, fraction, diffusion
    )


def _h100s(free: list[int], ram: int = 64) -> tuple[tuple[Gpu, ...], Allocatable]:
    gpus = tuple(Gpu("cuda", index, 100) for index in range(len(free)))
    return gpus, Allocatable(ram, dict(enumerate(free)))


def test_a_group_across_the_boundary_passes_only_with_equal_counts() -> None:
    """90 and 100 share a group (90 >= 0.9 × 100); 89 starts its own. Two workers with
    two such GPUs each pass; one with two and one with one do not."""
    assert _stage_gate([_h100s([90, 100, 0]), _h100s([100, 95])], 0, 0.9, False)
    assert _gpustack_gate([_h100s([90, 100, 0]), _h100s([100, 95])], 0, 0.9, False)
    assert not _stage_gate([_h100s([90, 100]), _h100s([100, 0])], 0, 0.9, False)
    assert not _gpustack_gate([_h100s([90, 100]), _h100s([100, 0])], 0, 0.9, False)


def test_a_gpu_below_the_fraction_fails_its_whole_group() -> None:
    """89 / 100 is below 0.9: its group (89, 90, 95) fails even though the counts are equal;
    diffusion skips the fraction."""
    cluster = [_h100s([89, 95]), _h100s([90, 95])]
    assert not _stage_gate(cluster, 0, 0.9, False)
    assert not _gpustack_gate(cluster, 0, 0.9, False)
    assert _stage_gate(cluster, 0, 0.9, True)
    assert _gpustack_gate(cluster, 0, 0.9, True)


def test_a_worker_short_of_ram_adds_no_slot() -> None:
    """The second worker has 10 of the 32 RAM claimed: left out, the first worker's two GPUs
    form the group alone and pass."""
    cluster = [_h100s([100, 100]), _h100s([100], ram=10)]
    assert _stage_gate(cluster, 32, 0.9, False)
    assert not _stage_gate(cluster, 0, 0.9, False)
    assert _gpustack_gate(cluster, 32, 0.9, False) and not _gpustack_gate(cluster, 0, 0.9, False)
