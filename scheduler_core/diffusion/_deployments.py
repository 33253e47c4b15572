"""Per-pipeline deployment configs (upstream ``ModelDeploymentConfig``) and their loader.

The values are data: ``configs/diffusion_deployments.json`` holds, for every
upstream ``pipeline_config_class``, the fields that differ from the defaults
below plus the family facts the tuner needs (Wan family, Wan2.2 A14B, DMD,
default CFG use, task type). The file is read and validated once per
directory and cached. Upstream: ``configs/pipeline_configs/model_deployment_config.py``.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from ._task_types import TaskType, upper_task_type

#: File name of the per-pipeline deployment data inside the configs directory.
DEPLOYMENTS_FILE_NAME = "diffusion_deployments.json"

#: ``keep_resident_components`` may only name these groups (upstream ``ModelDeploymentConfig``).
KeepResidentGroup = Literal["dit", "text_encoder", "image_encoder", "vae"]

#: Fallback degree of upstream ``ModelDeploymentConfig.get_auto_cfg_parallel_degree`` when no row matches.
DEFAULT_AUTO_CFG_PARALLEL_DEGREE = 2

#: Wan2.2 A14B configs are recognised by name: prefix ``Wan2_2_`` and ``A14B`` inside
#: (``ServerArgsAutoTuner._is_wan2_2_a14b_pipeline_config``).
WAN2_2_A14B_PREFIX = "Wan2_2_"
WAN2_2_A14B_MARKER = "A14B"


#: The package that ships ``configs/`` (package data of the wheel; ``configs/`` in a checkout).
CONFIG_PACKAGE = "gpusched_configs"


def default_configs_dir() -> Path:
    """The shipped ``configs/`` directory, found through :mod:`importlib.resources`.

    An installed ``gpusched`` carries it as the ``gpusched_configs`` package, so the
    tuner finds its data from any working directory; a source tree that is not
    installed falls back to the ``configs/`` folder two levels above this package.
    """
    try:
        return Path(str(resources.files(CONFIG_PACKAGE)))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "configs"


def is_wan2_2_a14b_name(pipeline_config_class: str) -> bool:
    """Upstream's Wan2.2 A14B predicate: a class-name rule, not a registry fact."""
    return (
        pipeline_config_class.startswith(WAN2_2_A14B_PREFIX) and WAN2_2_A14B_MARKER in pipeline_config_class
    )


class DeploymentConfig(BaseModel):
    """Deployment knobs of one pipeline (upstream ``ModelDeploymentConfig`` at bd3f6a793).

    Frozen; unknown keys are rejected (``ValueError``). Defaults are upstream's.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Lets the Wan DiT join the default layerwise set (memory: always; auto: A14B only).
    auto_dit_layerwise_offload: bool = False
    #: Declared upstream (MOVA sets 130) but read nowhere at bd3f6a793; carried as data only.
    auto_dit_layerwise_offload_high_memory_disable_gb: float | None = None
    #: Free-GiB threshold to keep components resident; None = 45 image / 120 otherwise.
    keep_resident_min_available_gb: float | None = Field(default=None, ge=0)
    #: Groups kept on the GPU when the threshold is met (upstream default: the VAE).
    keep_resident_components: tuple[KeepResidentGroup, ...] = ("vae",)
    #: Minimum free GiB for auto-FSDP; None = never auto-FSDP (speed needs it non-None).
    fsdp_auto_min_available_memory_gb: float | None = Field(default=None, ge=0)
    #: Auto-FSDP only when the model's default sampling uses CFG.
    fsdp_auto_requires_cfg: bool = True
    #: In auto mode an explicit parallel flag blocks auto-FSDP.
    fsdp_auto_requires_default_parallelism: bool = True
    #: Gates both the tuner's CFG-parallel enable and the parallelism defaults.
    auto_enable_cfg_parallel: bool = True
    #: ``((num_gpus, degree), ...)`` overrides of the default CFG-parallel degree.
    auto_cfg_parallel_degree_by_num_gpus: tuple[tuple[int, int], ...] = ()

    def auto_cfg_parallel_degree(self, num_gpus: int) -> int:
        """CFG-parallel degree for ``num_gpus`` (``get_auto_cfg_parallel_degree``).

        Returns the degree of the first row whose GPU count equals ``num_gpus``,
        else ``DEFAULT_AUTO_CFG_PARALLEL_DEGREE``. Pure.
        """
        for row_num_gpus, degree in self.auto_cfg_parallel_degree_by_num_gpus:
            if row_num_gpus == num_gpus:
                return degree
        return DEFAULT_AUTO_CFG_PARALLEL_DEGREE


class PipelineFamily(BaseModel):
    """Facts about one pipeline config class that upstream derives from code or registry.

    ``uses_cfg``/``task_type`` are None where the upstream value is not known.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    is_wan_family: bool = False
    is_wan2_2_a14b: bool = False
    dmd_distilled: bool = False
    uses_cfg: bool | None = None
    task_type: Annotated[TaskType | None, BeforeValidator(upper_task_type)] = None


class DeploymentEntry(BaseModel):
    """One ``pipeline_config_class``: its deployment config and family facts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    deployment: DeploymentConfig = DeploymentConfig()
    family: PipelineFamily = PipelineFamily()
    note: str | None = None


class DeploymentCatalog(BaseModel):
    """The whole ``diffusion_deployments.json`` file, validated.

    Raises:
        ValueError: on unknown keys, wrong types, or an ``is_wan2_2_a14b`` fact
            that contradicts upstream's class-name rule.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    pipelines: dict[str, DeploymentEntry]

    @model_validator(mode="after")
    def _a14b_fact_matches_name_rule(self) -> DeploymentCatalog:
        for name, entry in self.pipelines.items():
            if entry.family.is_wan2_2_a14b != is_wan2_2_a14b_name(name):
                raise ValueError(
                    f"pipelines.{name}.family.is_wan2_2_a14b contradicts the class-name rule "
                    f"(starts with {WAN2_2_A14B_PREFIX!r} and contains {WAN2_2_A14B_MARKER!r})"
                )
        return self

    def lookup(self, pipeline_config_class: str) -> DeploymentEntry | None:
        """The entry for ``pipeline_config_class`` (exact name), or None when unknown."""
        return self.pipelines.get(pipeline_config_class)


def load_deployment_configs(directory: Path | None = None) -> DeploymentCatalog:
    """Load and validate ``diffusion_deployments.json``; cached per directory.

    Args:
        directory: folder holding the file; defaults to the repository's ``configs/``.

    Returns:
        The validated, frozen catalog. Repeated calls with the same directory
        return the same object (idempotent, no re-read).

    Raises:
        ValueError: when the file is missing or does not validate.
    """
    base = directory if directory is not None else default_configs_dir()
    return _load_catalog(base.resolve())


_M = TypeVar("_M", bound=BaseModel)


def read_config_model(path: Path, model: type[_M], what: str) -> _M:
    """Read and validate one JSON config file as ``model``.

    Raises:
        ValueError: the file cannot be read (naming ``what`` and the path) or does
            not validate (a ``pydantic.ValidationError``).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read {what} at {path}: {exc}") from exc
    return model.model_validate_json(text)


@functools.lru_cache(maxsize=8)
def _load_catalog(directory: Path) -> DeploymentCatalog:
    return read_config_model(
        directory / DEPLOYMENTS_FILE_NAME, DeploymentCatalog, "diffusion deployment configs"
    )
