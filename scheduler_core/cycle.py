"""A decision's policy-owned state, keyed by type (kube-scheduler's ``CycleState``).

The generic orchestrator knows no policy. A strategy that needs facts of its
own (``policy: precise``'s :class:`~scheduler_core.precise.facts.PreciseFacts`)
builds them in its ``prepare`` step from the :class:`DecisionInputs` and files
them in the decision's :class:`CycleState` under their type; a second strategy
asking for the same type gets the same object (built once per decision). The
settings a chain carries for its policies live in :class:`PolicySettings`,
one object per type, so the chain's type names no policy either.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

from scheduler_core._schemas import ScheduleRequest
from scheduler_core.estimate import ModelFacts
from scheduler_core.model_config import ModelParameters
from scheduler_core.params import BackendParameters

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class PolicySettings:
    """The settings objects a chain carries, at most one per type (hashable when they are).

    A policy reads its own with :meth:`get`; a type the chain does not carry reads
    as its defaults (``kind()``), so every settings type must construct without arguments.
    """

    entries: tuple[object, ...] = ()

    def __post_init__(self) -> None:
        kinds = [type(entry) for entry in self.entries]
        if len(set(kinds)) != len(kinds):
            raise ValueError(f"settings of one type given twice: {sorted(k.__name__ for k in kinds)}")

    @classmethod
    def of(cls, *entries: object) -> PolicySettings:
        """The settings ``entries`` (None entries left out)."""
        return cls(tuple(entry for entry in entries if entry is not None))

    def get(self, kind: type[_T]) -> _T:
        """The carried settings of exactly ``kind``, else ``kind()``."""
        for entry in self.entries:
            if type(entry) is kind:
                return entry
        return kind()


@dataclass(frozen=True, slots=True)
class DecisionInputs:
    """What a strategy's ``prepare`` may read: the request and what the decision derived from it.

    Attributes:
        request: the parsed request.
        facts: the model's weights and folder facts.
        model_params: the model's hyperparameters.
        params: the backend parameters as parsed by GPUStack's rules.
        categories: the model's categories (``image`` when a diffusers folder says so).
        settings: the chain's policy settings.
    """

    request: ScheduleRequest
    facts: ModelFacts
    model_params: ModelParameters
    params: BackendParameters
    categories: Sequence[str]
    settings: PolicySettings


class CycleState:
    """Per-decision facts, one per type, built on first request (never shared across decisions)."""

    __slots__ = ("_facts",)

    def __init__(self) -> None:
        self._facts: dict[type, object] = {}

    def prepare(self, kind: type[_T], build: Callable[[], _T]) -> _T:
        """The decision's ``kind`` facts, built by ``build`` the first time they are asked for.

        ``build`` may raise (a :class:`~scheduler_core.errors.RequestError` rejects the
        request); nothing is filed then.
        """
        known = self._facts.get(kind)
        if known is None:
            known = self._facts[kind] = build()
        return cast(_T, known)

    def get(self, kind: type[_T]) -> _T | None:
        """The ``kind`` facts if a step filed them, else None."""
        return cast("_T | None", self._facts.get(kind))

    def read(self, kind: type[_T]) -> _T:
        """The ``kind`` facts a ``prepare`` step filed.

        Raises:
            LookupError: no strategy of the chain prepared them.
        """
        known = self._facts.get(kind)
        if known is None:
            raise LookupError(f"no {kind.__name__} prepared for this decision")
        return cast(_T, known)

    def kinds(self) -> tuple[type, ...]:
        """The types filed so far, in the order they were prepared."""
        return tuple(self._facts)
