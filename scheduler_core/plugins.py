"""The registry: the policies and plugins a chain can name, GPUStack's default chain, and the
wake rules a chain implies.

The one module that knows every policy: a new policy is its own package plus one
:func:`register_policy` call (here for the built-in ones; a test may register its own).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler_core import _schemas
from scheduler_core.cycle import PolicySettings
from scheduler_core.filters import ClusterFilter, GpuSelectorFilter, LabelFilter, StatusFilter
from scheduler_core.framework import (
    GPUSTACK,
    Chain,
    Policy,
    Scorer,
    Strategy,
    WorkerFilter,
)
from scheduler_core.precise.policy import PRECISE_POLICY
from scheduler_core.strategies.policy import GPUSTACK_POLICY

#: GPUStack's worker filters, in its order (``scheduler/scheduler.py: find_candidate``).
DEFAULT_FILTERS: tuple[WorkerFilter, ...] = (
    ClusterFilter(),
    GpuSelectorFilter(),
    LabelFilter(),
    StatusFilter(),
)

#: GPUStack's order: manual → 1 GPU → 1 worker with N GPUs → N workers.
DEFAULT_STRATEGIES: tuple[Strategy, ...] = GPUSTACK_POLICY.strategies

#: The policies requests may name, by name (see :func:`register_policy`).
POLICIES: dict[str, Policy] = {}
#: Each policy's own chain: GPUStack's filters, the policy's strategies and scorer.
CHAINS_BY_POLICY: dict[str, Chain] = {}
#: Plugins by name, for deployments that compose their own chain.
FILTERS_BY_NAME: Mapping[str, WorkerFilter] = {f.name: f for f in DEFAULT_FILTERS}
STRATEGIES_BY_NAME: dict[str, Strategy] = {}
SCORERS_BY_NAME: dict[str, Scorer] = {}


def register_policy(policy: Policy) -> Chain:
    """Make ``policy`` one requests may name, with its strategies and scorer by name.

    Returns:
        The policy's own chain (GPUStack's filters, its strategies and scorer).

    Raises:
        ValueError: a policy of that name, or a plugin of one of its names, is registered.
    """
    clash = [s.name for s in policy.strategies if STRATEGIES_BY_NAME.get(s.name, s) is not s]
    if policy.name in POLICIES or clash:
        raise ValueError(f"policy {policy.name!r} or its strategies {clash} are registered already")
    POLICIES[policy.name] = policy
    STRATEGIES_BY_NAME.update((s.name, s) for s in policy.strategies)
    SCORERS_BY_NAME.setdefault(policy.scorer.name, policy.scorer)
    _schemas.POLICIES.append(policy.name)
    chain = CHAINS_BY_POLICY[policy.name] = Chain(DEFAULT_FILTERS, policy.strategies, scorer=policy.scorer)
    return chain


def unregister_policy(name: str) -> None:
    """Forget the policy ``name`` and its plugins (a test's own; idempotent)."""
    policy = POLICIES.pop(name, None)
    if policy is None:
        return
    for strategy in policy.strategies:
        if not any(strategy in other.strategies for other in POLICIES.values()):
            STRATEGIES_BY_NAME.pop(strategy.name, None)
    scorer = policy.scorer
    if SCORERS_BY_NAME.get(scorer.name) is scorer and not any(p.scorer is scorer for p in POLICIES.values()):
        del SCORERS_BY_NAME[scorer.name]
    _schemas.POLICIES.remove(name)
    CHAINS_BY_POLICY.pop(name, None)


#: GPUStack's chain.
DEFAULT_CHAIN = Chain(filters=DEFAULT_FILTERS, strategies=DEFAULT_STRATEGIES)
register_policy(GPUSTACK_POLICY)
CHAINS_BY_POLICY[GPUSTACK] = DEFAULT_CHAIN  # its scorer is the policy's: None
#: The precise chain (without GPU sharing unless a request asks for it).
PRECISE_CHAIN = register_policy(PRECISE_POLICY)
#: ``policy: precise``'s stages.
PRECISE_STRATEGIES: tuple[Strategy, ...] = PRECISE_POLICY.strategies


def policy_of(chain: Chain) -> Policy:
    """The registered policy ``chain`` implements."""
    return POLICIES[chain.policy]


def chain_for(policy: str, configured: Chain | None = None) -> Chain:
    """The chain a request of ``policy`` runs.

    The configured chain when it implements that policy; otherwise the policy's own
    strategies and scorer with the configured filters, candidate cap and settings
    (a service configured for one policy still decides requests of the other).
    """
    if configured is None:
        return CHAINS_BY_POLICY[policy]
    if configured.policy == policy:
        return configured
    own = CHAINS_BY_POLICY[policy]
    return Chain(
        configured.filters, own.strategies, configured.max_candidates, own.scorer, configured.settings
    )


def scorer_of(chain: Chain) -> Scorer:
    """The chain's scorer, or its policy's."""
    return chain.scorer or policy_of(chain).scorer


def chain_of(
    filters: Sequence[str],
    strategies: Sequence[str],
    max_candidates: int | None = None,
    scorer: str | None = None,
    settings: PolicySettings | None = None,
) -> Chain:
    """A chain of the named plugins, in the given order (scorer None: the policy's).

    Raises:
        KeyError: a name is not a known plugin.
    """
    return Chain(
        filters=tuple(FILTERS_BY_NAME[name] for name in filters),
        strategies=tuple(STRATEGIES_BY_NAME[name] for name in strategies),
        max_candidates=max_candidates,
        scorer=None if scorer is None else SCORERS_BY_NAME[scorer],
        settings=settings or PolicySettings(),
    )
