"""Which freed GPUs could place a parked request: each strategy's own answer, and their union.

kube-scheduler lets each plugin judge a cluster event for the pods *it*
rejected (``QueueingHintFn``). Here a strategy answers at decision time with a
:class:`GpuFloor`, the least a GPU must offer to be part of one of *its*
candidates for this request (:meth:`Strategy.wake_floor
<scheduler_core.framework.Strategy.wake_floor>`); the service stores the
union of the answers with the parked request and, when claims are freed,
asks the floor whether a freed GPU reaches it (:meth:`GpuFloor.could_clear`).
A floor only ever rules a GPU out when no strategy could use it: a request may
be woken in vain, never forgotten.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduler_core._schemas import EstimateOut, ModelSpec, Worker
from scheduler_core.cycle import CycleState, PolicySettings


@dataclass(frozen=True, slots=True)
class GpuFloor:
    """The least a freed GPU must offer to be part of a candidate (both parts must be reached).

    Attributes:
        shares: per GPU type, the allocatable share (allocatable / total) a GPU of that
            type needs; a type not named has no share floor. None: no share floor at all.
        least_bytes: the allocatable bytes any GPU needs; None: no floor in bytes.
    """

    shares: Mapping[str, float] | None = None
    least_bytes: int | None = None

    def union(self, other: GpuFloor) -> GpuFloor:
        """The loosest floor that admits every GPU either floor admits (per part, the lower)."""
        shares = _shares_union(self.shares, other.shares)
        return GpuFloor(shares, _bytes_union(self.least_bytes, other.least_bytes))

    def could_clear(
        self, shares: Sequence[tuple[str | None, float]] | None, frees: Sequence[int] | None
    ) -> bool:
        """Whether some freed GPU reaches the floor.

        Args:
            shares: each freed GPU's ``(type, allocatable / total)`` after the change; None:
                not known.
            frees: each freed GPU's allocatable bytes after the change (the order of
                ``shares``); None: not known.

        True whenever it cannot be ruled out: nothing known about the freed GPUs, or a
        freed GPU of a type the share floor does not name. The bytes are checked first
        when both they and a floor in bytes are known.
        """
        if self.least_bytes and frees is not None:
            least = self.least_bytes
            return any(free >= least for free in frees)
        if self.shares is None or shares is None:
            return True
        floor = self.shares
        for gpu_type, share in shares:
            needed = floor.get(gpu_type) if gpu_type is not None else None
            if needed is None or share >= needed:
                return True
        return False


#: No floor: any freed GPU could help.
ANY_GPU = GpuFloor()


def _shares_union(
    left: Mapping[str, float] | None, right: Mapping[str, float] | None
) -> dict[str, float] | None:
    """Per type named by both, the lower share (a type one side leaves out has no floor)."""
    if left is None or right is None:
        return None
    return {gpu_type: min(share, right[gpu_type]) for gpu_type, share in left.items() if gpu_type in right}


def _bytes_union(left: int | None, right: int | None) -> int | None:
    return None if left is None or right is None else min(left, right)


@dataclass(frozen=True, slots=True)
class WakeQuery:
    """What a strategy's wake answer may read about a parked decision.

    Attributes:
        model: the request's model (its parallel sizes, its manual selection).
        estimate: the decision's estimate (weights, fraction per GPU type).
        settings: the chain's policy settings.
        workers: the cluster the decision saw.
        state: the facts the decision's strategies prepared (:class:`scheduler_core.decision.Decided`);
            None when not known (a strategy then answers from the estimate alone, looser).
    """

    model: ModelSpec
    estimate: EstimateOut
    settings: PolicySettings
    workers: Sequence[Worker]
    state: CycleState | None = None

    @property
    def manual(self) -> bool:
        """The user selected GPUs (only the manual stage runs, and it overcommits instead of skipping)."""
        selector = self.model.gpu_selector
        return selector is not None and bool(selector.gpu_ids)


def union_of(answers: Iterable[GpuFloor | None]) -> GpuFloor:
    """The union of the strategies' answers (None: the strategy does not run for the request).

    No answer at all gives :data:`ANY_GPU`.
    """
    floors = [answer for answer in answers if answer is not None]
    if not floors:
        return ANY_GPU
    union = floors[0]
    for floor in floors[1:]:
        union = union.union(floor)
    return union
