"""Resolve the deployment config and the pipeline facts of one request.

Request values win; gaps are filled from ``diffusion_deployments.json``;
what neither knows falls back to upstream's base behaviour. Each source is
written to the decision log.
"""

from __future__ import annotations

from ._deployments import (
    DeploymentCatalog,
    DeploymentConfig,
    DeploymentEntry,
    PipelineFamily,
    is_wan2_2_a14b_name,
)
from ._models import PipelineInfo, TuneRequest
from ._state import ResolvedPipeline

#: Assumed when neither request nor data says: diffusers-generic sampling uses CFG
#: (upstream ``configs/sample/diffusers_generic.py: DiffusersGenericSamplingParams``).
FALLBACK_USES_CFG = True


def _describe_non_defaults(config: DeploymentConfig) -> str:
    changed = config.model_dump(exclude_defaults=True)
    if not changed:
        return "all defaults"
    return ", ".join(f"{name}={changed[name]!r}" for name in sorted(changed))


def resolve_deployment(
    request: TuneRequest, catalog: DeploymentCatalog, logs: list[str]
) -> tuple[DeploymentConfig, DeploymentEntry | None]:
    """Pick the deployment config: the request's own, the catalog's, or the base one.

    Returns:
        The config to use and the catalog entry of the class (None when unknown).
    """
    name = request.pipeline.pipeline_config_class
    entry = catalog.lookup(name)
    if request.deployment_config is not None:
        config = request.deployment_config
        logs.append(
            f"Using the deployment config given in the request for {name}: {_describe_non_defaults(config)}"
        )
        return config, entry
    if entry is None:
        logs.append(
            f"No deployment config for pipeline_config_class={name!r}; "
            "falling back to the base ModelDeploymentConfig defaults"
        )
        return DeploymentConfig(), None
    logs.append(f"Deployment config for {name}: {_describe_non_defaults(entry.deployment)}")
    return entry.deployment, entry


def _task_type(info: PipelineInfo, family: PipelineFamily, derived: list[str]) -> str:
    if info.task_type is not None:
        return info.task_type
    if family.task_type is None:
        raise ValueError(
            "pipeline.task_type: not given and not known for "
            f"pipeline_config_class={info.pipeline_config_class!r}"
        )
    derived.append("task_type")
    return family.task_type


def _uses_cfg(info: PipelineInfo, family: PipelineFamily, derived: list[str]) -> bool:
    if info.model_default_uses_cfg is not None:
        return info.model_default_uses_cfg
    if family.uses_cfg is not None:
        derived.append("model_default_uses_cfg")
        return family.uses_cfg
    derived.append("model_default_uses_cfg (assumed, diffusers-generic default)")
    return FALLBACK_USES_CFG


def _flag(given: bool | None, fallback: bool, name: str, derived: list[str]) -> bool:
    if given is not None:
        return given
    derived.append(name)
    return fallback


def resolve_pipeline(info: PipelineInfo, entry: DeploymentEntry | None, logs: list[str]) -> ResolvedPipeline:
    """Fill the request's None pipeline flags from the class's family facts.

    ``is_wan2_2_a14b`` falls back to upstream's class-name rule, the others to
    the data (or False; CFG use to True) when the class is unknown.

    Raises:
        ValueError: when ``task_type`` is neither given nor known for the class.
    """
    family = entry.family if entry is not None else PipelineFamily()
    name = info.pipeline_config_class
    derived: list[str] = []
    resolved = ResolvedPipeline(
        config_class=name,
        task_type=_task_type(info, family, derived),
        is_wan_family=_flag(info.is_wan_family, family.is_wan_family, "is_wan_family", derived),
        is_wan2_2_a14b=_flag(info.is_wan2_2_a14b, is_wan2_2_a14b_name(name), "is_wan2_2_a14b", derived),
        dmd_denoising_steps_set=_flag(
            info.dmd_denoising_steps_set, family.dmd_distilled, "dmd_denoising_steps_set", derived
        ),
        uses_cfg=_uses_cfg(info, family, derived),
        is_ltx23_two_stage=_flag(
            info.is_ltx23_two_stage_pipeline, False, "is_ltx23_two_stage_pipeline", derived
        ),
    )
    logs.append(_describe_pipeline(resolved, derived))
    return resolved


def _describe_pipeline(resolved: ResolvedPipeline, derived: list[str]) -> str:
    facts = (
        f"task_type={resolved.task_type}, is_wan_family={resolved.is_wan_family}, "
        f"is_wan2_2_a14b={resolved.is_wan2_2_a14b}, "
        f"dmd_denoising_steps_set={resolved.dmd_denoising_steps_set}, "
        f"model_default_uses_cfg={resolved.uses_cfg}, "
        f"is_ltx23_two_stage_pipeline={resolved.is_ltx23_two_stage}"
    )
    source = f"; not in the request, derived: {', '.join(derived)}" if derived else ""
    return f"Pipeline facts for {resolved.config_class}: {facts}{source}"
