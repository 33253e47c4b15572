"""The plugin chain a deployment runs, loaded from ``configs/chain.json``.

A chain names the worker filters and placement strategies in the order they
run, each with an ``enabled`` switch, and the scorer::

    {
      "name": "gpustack-default",
      "filters":    [{"name": "cluster", "enabled": true}, ...],
      "strategies": [{"name": "manual_gpu_selection", "enabled": true}, ...],
      "scorer": "model",
      "max_candidates": 16,
      "precise": {"gpu_sharing": true}
    }

Filter and strategy names are the keys of the core's
:data:`scheduler_core.FILTERS_BY_NAME` (``cluster``, ``gpu_selector``,
``labels``, ``status``) and :data:`scheduler_core.STRATEGIES_BY_NAME`
(``manual_gpu_selection``, ``single_worker_single_gpu``,
``single_worker_multi_gpu``, ``multi_worker_multi_gpu``). ``scorer`` is ``model``
(the model's own ``placement_strategy``, GPUStack's behaviour), ``spread`` or
``binpack`` (forced for every request). ``max_candidates`` caps the candidates
a result lists (the chosen one is always among them; ``candidates_total`` says
how many there were); leave it out to list all of them. ``precise`` (optional) sets
the knobs of ``policy: precise`` for every request it decides
(:class:`scheduler_core.PreciseSettings`: ``gpu_sharing``, ``sglang_context``,
``admission_margin``, ``headroom_ratio``, ``headroom_min``, ``kv_floor_cap``,
``max_window_candidates``, ``max_shape_candidates``; a request's own ``gpu_sharing``
wins); ``policy: gpustack`` never reads them. Only the default chain keeps
``policy: gpustack`` parity. The spec is recorded in every decision event so a
replay runs the same chain.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from scheduler_core import (
    DEFAULT_CHAIN,
    FILTERS_BY_NAME,
    STRATEGIES_BY_NAME,
    Chain,
    PolicySettings,
    PreciseSettings,
    canonical_json,
)
from tasks.base.settings import SettingsError


class ChainConfigError(SettingsError):
    """``chain.json`` is unreadable, not a valid chain (an unknown or duplicate plugin, a bad
    ``precise`` block): configuration the deployment cannot run with (the CLI's exit 2)."""


class PluginSwitch(BaseModel):
    """One plugin of the chain and whether it runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    enabled: bool = True


_PRECISE_DEFAULTS = PreciseSettings()


class PreciseSpec(BaseModel):
    """The ``precise`` block: :class:`scheduler_core.PreciseSettings` for every request
    decided under ``policy: precise`` (defaults as there; bytes as integers)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu_sharing: bool = False
    sglang_context: int = Field(default=_PRECISE_DEFAULTS.sglang_context, ge=0, le=1 << 50)
    admission_margin: int = Field(default=_PRECISE_DEFAULTS.admission_margin, ge=0, le=1 << 50)
    headroom_ratio: float = Field(default=_PRECISE_DEFAULTS.headroom_ratio, ge=0, le=10)
    headroom_min: int = Field(default=_PRECISE_DEFAULTS.headroom_min, ge=0, le=1 << 50)
    kv_floor_cap: int = Field(default=_PRECISE_DEFAULTS.kv_floor_cap, ge=1, le=1 << 30)
    max_window_candidates: int = Field(default=_PRECISE_DEFAULTS.max_window_candidates, ge=1, le=1024)
    max_shape_candidates: int = Field(default=_PRECISE_DEFAULTS.max_shape_candidates, ge=1, le=1024)

    def settings(self) -> PreciseSettings:
        """The core's settings object."""
        return PreciseSettings(**self.model_dump())


class ChainSpec(BaseModel):
    """The validated content of ``chain.json`` (also stored in decision events)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "gpustack-default"
    filters: list[PluginSwitch] = Field(
        default_factory=lambda: [PluginSwitch(name=name) for name in FILTERS_BY_NAME]
    )
    strategies: list[PluginSwitch] = Field(
        default_factory=lambda: [PluginSwitch(name=s.name) for s in DEFAULT_CHAIN.strategies]
    )
    scorer: Literal["model", "spread", "binpack"] = "model"
    #: Candidates reported per result (the chosen one plus the best-scoring, in selector
    #: order); None reports all, as GPUStack does. A 500-node cluster yields thousands.
    max_candidates: int | None = Field(default=None, ge=1)
    #: ``policy: precise`` settings; absent: the defaults (not recorded, so a chain without
    #: the block keeps the digest it always had).
    precise: PreciseSpec | None = None

    @model_validator(mode="after")
    def _known_plugins(self) -> ChainSpec:
        _check_names("filters", self.filters, FILTERS_BY_NAME)
        _check_names("strategies", self.strategies, STRATEGIES_BY_NAME)
        if not any(s.enabled for s in self.strategies):
            raise ValueError("strategies: at least one strategy must be enabled")
        return self

    def document(self) -> dict[str, Any]:
        """The spec as JSON (an absent ``precise`` block left out)."""
        dumped = self.model_dump(mode="json")
        if dumped["precise"] is None:
            del dumped["precise"]
        return dumped

    @property
    def digest(self) -> str:
        """sha256 of the canonical spec (names, order, switches, scorer, precise settings)."""
        return hashlib.sha256(canonical_json(self.document()).encode()).hexdigest()


def _check_names(section: str, switches: list[PluginSwitch], known: Mapping[str, Any]) -> None:
    seen: set[str] = set()
    for position, switch in enumerate(switches):
        if switch.name not in known:
            raise ValueError(f"{section}.{position}: unknown plugin {switch.name!r}; known: {sorted(known)}")
        if switch.name in seen:
            raise ValueError(f"{section}.{position}: plugin {switch.name!r} listed twice")
        seen.add(switch.name)


@dataclass(frozen=True, slots=True)
class LoadedChain:
    """A chain spec and the core :class:`~scheduler_core.Chain` it builds."""

    spec: ChainSpec
    chain: Chain
    #: The spec as every decision event records it (its JSON and its digest), built once.
    recorded_spec: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        recorded = {**self.spec.document(), "digest": self.spec.digest}
        object.__setattr__(self, "recorded_spec", recorded)

    @property
    def placement_override(self) -> Literal["spread", "binpack"] | None:
        """The forced placement strategy, or None to use the model's own."""
        return None if self.spec.scorer == "model" else self.spec.scorer


def build_chain(spec: ChainSpec) -> LoadedChain:
    """Turn a validated spec into the core's chain (enabled plugins, in order)."""
    filters = tuple(FILTERS_BY_NAME[s.name] for s in spec.filters if s.enabled)
    strategies = tuple(STRATEGIES_BY_NAME[s.name] for s in spec.strategies if s.enabled)
    settings = (spec.precise or PreciseSpec()).settings()
    chain = Chain(
        filters=filters, strategies=strategies, max_candidates=spec.max_candidates,
        settings=PolicySettings.of(settings),
    )
    return LoadedChain(spec, chain)


def parse_chain(data: Any) -> LoadedChain:
    """Validate a chain document (dict) and build it.

    Raises:
        ChainConfigError: unknown/duplicate plugin, no strategy enabled, wrong shape.
    """
    try:
        spec = ChainSpec.model_validate(data)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "chain"
        raise ChainConfigError(f"{where}: {str(first['msg']).removeprefix('Value error, ')}") from None
    return build_chain(spec)


def load_chain(path: Path) -> LoadedChain:
    """Read and validate ``chain.json``; a missing file means the default chain.

    Raises:
        ChainConfigError: the file is not JSON or not a valid chain (one line naming
            the file and the problem).
    """
    if not path.is_file():
        return build_chain(ChainSpec())
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:  # not UTF-8 or not JSON
        raise ChainConfigError(f"invalid chain configuration {path}: {error}") from None
    try:
        return parse_chain(data)
    except ChainConfigError as error:
        raise ChainConfigError(f"invalid chain configuration {path}: {error}") from None
