"""Stage 4: several workers (``sglang_resource_fit_selector.py: find_multi_worker_multi_gpu_candidates``).

A cross-worker memory-balanced GPU group acts as a gate: when some group has
every GPU above the fraction and the same GPU count on each of its workers
(no tensor-parallel check here: upstream checks tp per whole-node bucket),
GPUStack runs ``auto_select_multi_worker_multi_gpu_candidates`` over *all*
workers of the type, taking whole nodes with equal GPU counts in order until
their claims cover the model. That selection does not depend on the group,
so it is computed once per GPU type here (same result, same events).
"""

from __future__ import annotations

import operator
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import repeat
from typing import ClassVar, NamedTuple

from scheduler_core._units import byte_to_gib
from scheduler_core.accounting import Allocatable
from scheduler_core.caching import Rule
from scheduler_core.candidates import Candidate, Claim, Subordinate
from scheduler_core.cluster import (
    balanced_groups,
    gpu_rate,
    ram_not_enough,
    sort_workers_by_gpu_count,
)
from scheduler_core.events import Action, Level, list_message
from scheduler_core.framework import Clears
from scheduler_core.memo import SlotKey
from scheduler_core.outcomes import FailureTally, StageOutcome
from scheduler_core.reasons import MORE_CAPACITY, Reason
from scheduler_core.selection import Selection
from scheduler_core.strategies.stage import GpustackStage
from scheduler_core.workers import Gpu, WorkerView

_NO_COMBINATION = (
    "Cannot find a suitable worker combination to run the model in distributed mode. "
    "If you are confident that the resources are sufficient, you may manually schedule the "
    "model by selecting the workers and GPUs."
)


class MultiWorkerMultiGpu(GpustackStage):
    """Distributed placement over whole nodes with equal GPU counts."""

    name = "multi_worker_multi_gpu"
    clears: ClassVar[Clears] = {Reason.NO_WORKER_COMBINATION: MORE_CAPACITY}

    def skip(self, selection: Selection) -> bool:
        """Skipped under manual selection, without distributed inference, for diffusion."""
        return bool(selection.selected_workers) or not selection.distributed or (selection.is_diffusion)

    def __call__(self, selection: Selection) -> StageOutcome:
        """At most one distributed candidate per GPU type; when a type's workers combine into
        none, each of them fails with ``no_worker_combination``."""
        tally = FailureTally(self.name)
        candidates: list[Candidate] = []
        for gpu_type, workers_of_type in selection.workers_by_type.items():
            inputs = _GateInputs(selection.ram_claim, selection.fraction(gpu_type), selection.is_diffusion)
            runner = selection.runner
            slots = list(map(_RESULT, runner.run(_SLOTS, inputs, gpu_type, workers_of_type)))
            amounts = runner.tally(_GATE_AMOUNTS.of((inputs, gpu_type)), slots, _AMOUNTS)
            below = runner.tally(_GATE_BELOW.of((inputs, gpu_type)), slots, _BELOW)
            if _gate_passes(list(filter(None, map(_AMOUNTS, slots))), amounts, below):
                found = _auto_select(selection, workers_of_type, gpu_type)
                if not found and len(workers_of_type) >= 2:
                    tally.add_all(Reason.NO_WORKER_COMBINATION, workers_of_type)
                candidates.extend(found)
        return tally.outcome(candidates)


@dataclass(frozen=True, slots=True)
class _GateInputs:
    """What the gate reads of the decision besides a worker: the RAM claim and the fraction."""

    ram_claim: int
    fraction: float
    diffusion: bool


class _Slots(NamedTuple):
    """A worker's GPUs as the gate sees them (GPUStack's ``group_worker_gpu_by_memory``):
    the allocatable VRAM of each GPU with an index, a size and room, ascending (none when
    the worker is short of RAM), and those of them below the fraction."""

    amounts: tuple[int, ...]
    below: tuple[int, ...]


def _worker_slots(inputs: _GateInputs, gpus: tuple[Gpu, ...], allocatable: Allocatable) -> _Slots:
    if ram_not_enough(inputs.ram_claim, allocatable):
        return _NO_SLOTS
    vram = allocatable.vram
    room = [(gpu, vram.get(gpu.index, 0)) for gpu in gpus if gpu.index is not None and gpu.total]
    room = [(gpu, amount) for gpu, amount in room if amount > 0]
    below = () if inputs.diffusion else tuple(a for gpu, a in room if a / gpu.total < inputs.fraction)
    return _Slots(tuple(sorted(amount for _, amount in room)), below)


def _same_slots(inputs: _GateInputs, worker: WorkerView, slots: _Slots) -> _Slots:
    return slots


_NO_SLOTS = _Slots((), ())
#: Kept per worker by the runner: a booking costs one worker's slots, not the cluster's.
_SLOTS = Rule("multi_worker_gate_slots", _worker_slots, _same_slots, reads_reported=False)
_AMOUNTS = operator.attrgetter("amounts")
#: A worker's result in the runner's (worker, result) pairs.
_RESULT = operator.itemgetter(1)
_BELOW = operator.attrgetter("below")
#: The gate's slot amounts and those below the fraction, counted over a GPU type's workers
#: (kept per gate inputs and type: a booking recounts one worker's).
_GATE_AMOUNTS = SlotKey("multi_worker_gate_amounts")
_GATE_BELOW = SlotKey("multi_worker_gate_below")


def _gate_passes(held: list[tuple[int, ...]], slots_of: Mapping[int, int], below: Mapping[int, int]) -> bool:
    """Whether some memory-balanced group of the workers' GPUs has every GPU at the fraction
    or above and the same GPU count on each of its workers (more than one GPU in all).

    GPUStack sorts every slot by allocatable VRAM and cuts greedily: a slot joins the
    current group while the group's first (smallest) slot has at least 0.9 × its VRAM.
    Slots of equal VRAM always share a group, so a group is a range of distinct amounts
    that starts where the previous one's first amount falls short of 0.9 × the next: the
    groups are cut on the distinct amounts, and only a group with no GPU below the
    fraction is counted per worker (at C speed: thousands of workers, a few such groups).

    ``held`` is each worker's amounts (sorted: a group's amounts are a range), ``slots_of``
    how many slots there are of each amount, ``below`` the amounts of slots below the
    fraction (their counts).
    """
    return any(
        _same_count_per_worker(held, amounts)
        for amounts in balanced_groups(slots_of, int)  # the distinct amounts, cut as GPUStack cuts slots
        if below.keys().isdisjoint(amounts) and sum(map(slots_of.__getitem__, amounts)) > 1
    )


def _same_count_per_worker(held: list[tuple[int, ...]], amounts: list[int]) -> bool:
    """Whether every worker with GPUs of these amounts (ascending) has the same number of them.

    The workers' counts are walked at C speed and the walk stops at the first worker whose
    count differs from the first worker's (most groups of a busy cluster fail early).
    """
    after = map(bisect_right, held, repeat(amounts[-1]))
    counts = filter(None, map(operator.sub, after, map(bisect_left, held, repeat(amounts[0]))))
    first = next(counts, 0)
    return bool(first) and next(filter(partial(operator.ne, first), counts), 0) == 0


def _whole_node_fits(selection: Selection, worker: WorkerView, gpu_type: str | None) -> bool:
    allocatable = selection.cluster.allocatable(worker, gpu_type)
    if ram_not_enough(selection.ram_claim, allocatable):
        return False  # extended-KV RAM is needed on every node
    if selection.is_diffusion:
        return True
    fraction = selection.fraction(gpu_type)
    # a GPU reporting no memory is skipped (GPUStack divides by its total and crashes)
    return not any(gpu.total and gpu_rate(allocatable.vram, gpu) < fraction for gpu in worker.gpus)


def _node_vram(selection: Selection, worker: WorkerView, gpu_type: str | None) -> int:
    if selection.is_diffusion:
        allocatable = selection.cluster.allocatable(worker, gpu_type)
        return sum(allocatable.vram.get(g.index, 0) for g in worker.gpus if g.index is not None)
    fraction = selection.fraction(gpu_type)
    return sum(int(gpu.total * fraction) for gpu in worker.gpus)


def _auto_select(
    selection: Selection, workers: Sequence[WorkerView], gpu_type: str | None
) -> list[Candidate]:
    if len(workers) < 2:
        return []
    buckets: dict[int, list[WorkerView]] = {}
    for worker in sort_workers_by_gpu_count(workers):
        if worker.gpus:
            buckets.setdefault(len(worker.gpus), []).append(worker)
    best: tuple[list[WorkerView], int, int, int] = ([], 0, 0, 0)
    for gpu_count, bucket in buckets.items():
        if len(bucket) < 2:
            continue
        chosen: list[WorkerView] = []
        vram_sum = 0
        for worker in bucket:
            if not _whole_node_fits(selection, worker, gpu_type):
                continue
            chosen.append(worker)
            vram_sum += _node_vram(selection, worker, gpu_type)
            if selection.tp_rule.divisible(gpu_count) and vram_sum >= selection.vram_claim:
                return [_distributed_candidate(selection, chosen, selection.mfs(gpu_type))]
        if vram_sum > best[1]:
            best = (chosen, vram_sum, len(bucket), gpu_count)
    _record_failure(selection, *best)
    return []


def _record_failure(
    selection: Selection, combination: list[WorkerView], vram: int, bucket_size: int, gpus: int
) -> None:
    lines: list[str] = []
    if combination:
        names = [worker.name for worker in combination]
        shown = (
            str(names) if len(names) <= 3 else (str(names[:3]).rstrip("]") + f"...(more {len(names) - 3})]")
        )
        message = f"The optimal combination {shown} provides {byte_to_gib(vram)} GiB of allocatable VRAM."
        skipped = bucket_size - len(combination)
        if skipped > 0:
            message += (
                f" There are {skipped} {'workers' if skipped > 1 else 'worker'} that can provide"
                f" {gpus} {'GPUs' if gpus > 1 else 'GPU'}, as the workers in the combination,"
                " but some GPUs among them fail to meet requirements."
            )
        lines.append(message)
    lines.append(_NO_COMBINATION)
    selection.log.events.add(
        Level.INFO, Action.AUTO_MULTI_WORKER_MULTI_GPU, list_message(lines), Reason.NO_WORKER_COMBINATION
    )


def _node_claim(worker: WorkerView, fraction: float) -> dict[int, int]:
    return {g.index: int(g.total * fraction) for g in worker.gpus if g.index is not None}


def _distributed_candidate(
    selection: Selection, workers: list[WorkerView], fraction: float | None
) -> Candidate:
    """GPUStack's ``_create_candidate``: the first worker leads with all its GPUs.

    The leader's claim carries no ``vram_utilization``; each follower's does.
    """
    leader = workers[0]
    share = fraction or 0.0
    gpu_type = leader.gpus[-1].type if leader.gpus else None
    subordinates = tuple(
        Subordinate(
            worker=worker,
            gpu_type=gpu_type,
            gpu_indexes=tuple(_node_claim(worker, share)),
            claim=selection.claim(_node_claim(worker, share), fraction),
        )
        for worker in workers[1:]
    )
    leader_vram = _node_claim(leader, share)
    leader_claim = Claim(
        vram=leader_vram,
        ram=selection.claim(leader_vram, None).ram,
        vram_utilization=None,
        estimated_vram=selection.vram_claim,
    )
    return Candidate(
        worker=leader,
        gpu_type=gpu_type,
        gpu_indexes=tuple(leader_vram),
        claim=leader_claim,
        subordinates=subordinates,
    )
