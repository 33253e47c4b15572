"""The diffusion auto-tuner: SGLang multimodal-gen's ServerArgs defaulting flow (Contract 2).

``tune(request)`` reproduces, for one diffusion deployment, upstream's
offload pre-defaults, the ``ServerArgsAutoTuner`` steps in upstream order,
the parallelism defaults, layerwise normalisation and validation. The
per-pipeline deployment configs and the diffusers -> SGLang pipeline map are
data in ``configs/``.

Upstream names in this package refer to SGLang at commit bd3f6a79, files under
``python/sglang/multimodal_gen/``: ``runtime/server_args/server_args.py``
(``ServerArgs``), ``runtime/server_args/auto_tune.py`` (``ServerArgsAutoTuner``),
``configs/pipeline_configs/model_deployment_config.py`` (``ModelDeploymentConfig``)
and ``runtime/managers/memory_managers/layerwise_offload_components.py``.
"""

from __future__ import annotations

from ._cli import diffusion_args_from_cli, tuned_cli_flags
from ._deployments import (
    DeploymentCatalog,
    DeploymentConfig,
    DeploymentEntry,
    PipelineFamily,
    load_deployment_configs,
)
from ._models import EnvFlags, PipelineInfo, PlatformInfo, ServerArgsInput, TuneRequest, TuneResult
from ._pipelines import load_pipeline_rules, pipeline_from_model_index
from ._tune import tune
from ._tuner import PERFORMANCE_MODES

__all__ = [
    "PERFORMANCE_MODES",
    "DeploymentCatalog",
    "DeploymentConfig",
    "DeploymentEntry",
    "EnvFlags",
    "PipelineFamily",
    "PipelineInfo",
    "PlatformInfo",
    "ServerArgsInput",
    "TuneRequest",
    "TuneResult",
    "diffusion_args_from_cli",
    "load_deployment_configs",
    "load_pipeline_rules",
    "pipeline_from_model_index",
    "tune",
    "tuned_cli_flags",
]
