"""Request and result models of the diffusion auto-tuner (Contract 2).

Unknown top-level (and nested platform/env/pipeline) fields are ignored;
wrong types raise ``pydantic.ValidationError`` (a ``ValueError``) whose
message names the field. ``explicit_args`` keeps *every* key it receives as
"explicitly set" — unknown names too — while only known names carry values.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from ._deployments import DeploymentConfig
from ._task_types import TaskType, upper_task_type

#: Platforms whose predicates (is_cuda, is_cpu, is_mps, ...) the flow asks (Contract 2).
PlatformKind = Literal["cuda", "rocm", "npu", "mps", "cpu"]


def _lower_str(value: object) -> object:
    return value.lower() if isinstance(value, str) else value


#: Most GPUs one diffusion deployment may name. The tuner's work grows with the GPU count,
#: and no SGLang diffusion deployment spans more than a few nodes of eight.
MAX_GPUS = 1024


class ServerArgsInput(BaseModel):
    """The user's explicit SGLang diffusion ServerArgs, with upstream ``ServerArgs`` defaults.

    ``explicit_names()`` is the set of keys given, even when equal to the
    default. Types are strict (no ``"2"`` for an int, no ``1`` for a bool).
    """

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    performance_mode: str | None = "auto"
    num_gpus: int = Field(default=1, ge=1, le=MAX_GPUS)
    base_gpu_id: int = Field(default=0, ge=0, le=MAX_GPUS)
    tp_size: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    sp_degree: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    ulysses_degree: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    ring_degree: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    enable_cfg_parallel: bool | None = None
    cfg_parallel_degree: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    dp_size: int = Field(default=1, ge=1, le=MAX_GPUS)
    use_fsdp_inference: bool | None = None
    dit_cpu_offload: bool | None = None
    dit_layerwise_offload: bool | None = None
    layerwise_offload_components: list[str] | str | None = None
    # No lower bound here: upstream refuses a negative size only when a layerwise list is set
    # (server_args.py: ServerArgs._validate_offload), with its own text (see _validation).
    dit_offload_prefetch_size: float = Field(default=0.0, allow_inf_nan=False)
    text_encoder_cpu_offload: bool | None = None
    image_encoder_cpu_offload: bool | None = None
    vae_cpu_offload: bool = False
    enable_torch_compile: bool = False
    # Any string: upstream reads (lower-cases, validates) the mode only for LTX-2.3 two-stage
    # pipelines and leaves it untouched elsewhere (see _server_steps.adjust_ltx2_two_stage_device_mode).
    ltx2_two_stage_device_mode: str | None = None

    def explicit_names(self) -> frozenset[str]:
        """Every argument name the user passed, known or not."""
        extra = self.__pydantic_extra__ or {}
        return frozenset(self.model_fields_set) | frozenset(extra)


class PlatformInfo(BaseModel):
    """The device platform the deployment runs on (memory in GiB)."""

    model_config = ConfigDict(frozen=True)

    kind: Annotated[PlatformKind, BeforeValidator(_lower_str)]
    device_total_memory_gib: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    available_memory_gib_by_device: dict[
        Annotated[int, Field(ge=0, le=MAX_GPUS)], Annotated[float, Field(ge=0, allow_inf_nan=False)]
    ] = Field(default_factory=dict, max_length=MAX_GPUS)
    device_name: str | None = None


class EnvFlags(BaseModel):
    """The SGLang environment variables the flow reads (None = unset).

    ``SGLANG_LTX2_TWO_STAGE_DEVICE_MODE`` is kept as given: the LTX-2.3 step treats
    an empty value as unset and validates the rest.
    """

    model_config = ConfigDict(frozen=True)

    SGLANG_CACHE_DIT_ENABLED: bool | None = None
    SGLANG_LTX2_TWO_STAGE_DEVICE_MODE: str | None = None

    @property
    def cache_dit_enabled(self) -> bool:
        """Whether cache-dit is on (unset means off)."""
        return bool(self.SGLANG_CACHE_DIT_ENABLED)


class PipelineInfo(BaseModel):
    """The pipeline being deployed; None flags are derived from the deployment data."""

    model_config = ConfigDict(frozen=True)

    pipeline_config_class: str = Field(min_length=1)
    task_type: Annotated[TaskType | None, BeforeValidator(upper_task_type)] = None
    is_wan_family: bool | None = None
    is_wan2_2_a14b: bool | None = None
    dmd_denoising_steps_set: bool | None = None
    model_default_uses_cfg: bool | None = None
    is_ltx23_two_stage_pipeline: bool | None = None


class TuneRequest(BaseModel):
    """One tuning request (Contract 2). ``deployment_config`` None = look it up by class."""

    model_config = ConfigDict(frozen=True)

    explicit_args: ServerArgsInput = Field(default_factory=ServerArgsInput)
    platform: PlatformInfo
    env: EnvFlags = Field(default_factory=EnvFlags)
    pipeline: PipelineInfo
    deployment_config: DeploymentConfig | None = None


class TuneResult(BaseModel):
    """Every tuned ServerArgs flag, the explicit names, and why each was set.

    None flags are the ones upstream leaves unset (manual mode skips the
    defaulting steps). ``logs`` is ordered as the decisions were taken.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    performance_mode: str
    enable_torch_compile: bool
    use_fsdp_inference: bool | None
    dit_cpu_offload: bool | None
    dit_layerwise_offload: bool | None
    layerwise_offload_components: list[str] | None
    text_encoder_cpu_offload: bool | None
    image_encoder_cpu_offload: bool | None
    vae_cpu_offload: bool
    dit_offload_prefetch_size: float
    enable_cfg_parallel: bool
    cfg_parallel_degree: int
    tp_size: int
    sp_degree: int
    ulysses_degree: int
    ring_degree: int
    ltx2_two_stage_device_mode: str | None
    num_gpus: int
    explicit_args: list[str]
    logs: list[str]
