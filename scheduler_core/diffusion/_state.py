"""Per-call tuning state: the mutable ServerArgs copy and the read-only context.

``ServerArgsState`` holds *values* and is rewritten step by step;
``TuneContext`` holds what never changes during one call (the explicit-name
set, platform, env, resolved pipeline facts, deployment config) plus the
ordered decision log. Keeping the explicit names apart from the values is
what lets "explicitly set, even to the default" survive every step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._deployments import DeploymentConfig
from ._models import PlatformInfo, ServerArgsInput
from ._task_types import is_action_gen, is_image_gen

#: Explicit names that make the whole memory policy user-owned (``_has_explicit_memory_policy``).
MEMORY_POLICY_ARGS = (
    "use_fsdp_inference",
    "dit_cpu_offload",
    "dit_layerwise_offload",
    "layerwise_offload_components",
)

#: Explicit names that block the CPU -> layerwise replacement (``_has_explicit_layerwise_...``).
LAYERWISE_REPLACEMENT_POLICY_ARGS = ("dit_layerwise_offload", "layerwise_offload_components")


@dataclass
class ServerArgsState:
    """Mutable working copy of the upstream ``ServerArgs`` fields the flow reads or writes."""

    performance_mode: str
    num_gpus: int
    base_gpu_id: int
    tp_size: int | None
    sp_degree: int | None
    ulysses_degree: int | None
    ring_degree: int | None
    enable_cfg_parallel: bool | None
    cfg_parallel_degree: int | None
    dp_size: int
    use_fsdp_inference: bool | None
    dit_cpu_offload: bool | None
    dit_layerwise_offload: bool | None
    layerwise_offload_components: list[str] | None
    dit_offload_prefetch_size: float
    text_encoder_cpu_offload: bool | None
    image_encoder_cpu_offload: bool | None
    vae_cpu_offload: bool
    enable_torch_compile: bool
    ltx2_two_stage_device_mode: str | None

    @classmethod
    def from_input(cls, given: ServerArgsInput, performance_mode: str) -> ServerArgsState:
        """Start from the user's values (upstream defaults where absent)."""
        raw_components = given.layerwise_offload_components
        components = raw_components
        if isinstance(raw_components, str):
            # a string is one comma list; "" names nothing and, like upstream's "", is falsy
            components = [raw_components] if raw_components else []
        return cls(
            performance_mode=performance_mode,
            num_gpus=given.num_gpus,
            base_gpu_id=given.base_gpu_id,
            tp_size=given.tp_size,
            sp_degree=given.sp_degree,
            ulysses_degree=given.ulysses_degree,
            ring_degree=given.ring_degree,
            enable_cfg_parallel=given.enable_cfg_parallel,
            cfg_parallel_degree=given.cfg_parallel_degree,
            dp_size=given.dp_size,
            use_fsdp_inference=given.use_fsdp_inference,
            dit_cpu_offload=given.dit_cpu_offload,
            dit_layerwise_offload=given.dit_layerwise_offload,
            layerwise_offload_components=None if components is None else list(components),
            dit_offload_prefetch_size=given.dit_offload_prefetch_size,
            text_encoder_cpu_offload=given.text_encoder_cpu_offload,
            image_encoder_cpu_offload=given.image_encoder_cpu_offload,
            vae_cpu_offload=given.vae_cpu_offload,
            enable_torch_compile=given.enable_torch_compile,
            ltx2_two_stage_device_mode=given.ltx2_two_stage_device_mode,
        )

    def offload_flag(self, name: str) -> bool | None:
        """Read one ``*_cpu_offload`` flag by field name."""
        value: bool | None = getattr(self, name)
        return value

    def set_offload_flag(self, name: str, value: bool) -> None:
        """Write one ``*_cpu_offload`` flag by field name."""
        setattr(self, name, value)


@dataclass(frozen=True)
class ResolvedPipeline:
    """Pipeline facts after filling request gaps from the deployment data."""

    config_class: str
    task_type: str
    is_wan_family: bool
    is_wan2_2_a14b: bool
    dmd_denoising_steps_set: bool
    uses_cfg: bool
    is_ltx23_two_stage: bool

    @property
    def is_image_gen(self) -> bool:
        """T2I, I2I or TI2I."""
        return is_image_gen(self.task_type)

    @property
    def is_action_gen(self) -> bool:
        """The VLA action task."""
        return is_action_gen(self.task_type)


@dataclass
class TuneContext:
    """Read-only facts of one tuning call, plus its ordered decision log."""

    explicit: frozenset[str]
    platform: PlatformInfo
    cache_dit_enabled: bool
    ltx2_env_mode: str | None
    pipeline: ResolvedPipeline
    deployment: DeploymentConfig
    logs: list[str] = field(default_factory=list)

    def log(self, message: str) -> None:
        """Append one decision line."""
        self.logs.append(message)

    def is_explicit(self, name: str) -> bool:
        """``ServerArgs.is_arg_explicitly_set``: present in the request, whatever its value."""
        return name in self.explicit

    @property
    def explicit_memory_policy(self) -> bool:
        """Any of the four memory-policy args was given explicitly."""
        return any(name in self.explicit for name in MEMORY_POLICY_ARGS)

    @property
    def explicit_layerwise_replacement_policy(self) -> bool:
        """``dit_layerwise_offload`` or ``layerwise_offload_components`` was given."""
        return any(name in self.explicit for name in LAYERWISE_REPLACEMENT_POLICY_ARGS)

    @property
    def is_cuda(self) -> bool:
        """``current_platform.is_cuda()``."""
        return self.platform.kind == "cuda"

    @property
    def is_cpu(self) -> bool:
        """``current_platform.is_cpu()``."""
        return self.platform.kind == "cpu"

    @property
    def is_mps(self) -> bool:
        """``current_platform.is_mps()``."""
        return self.platform.kind == "mps"

    @property
    def enables_wan_dit_layerwise_by_default(self) -> bool:
        """``current_platform.enable_dit_layerwise_offload_for_wan_by_default()``: CUDA only."""
        return self.is_cuda

    def min_available_gib(self, args: ServerArgsState) -> float | None:
        """Least free GiB over the selected devices; None on CPU.

        The selected devices are ``base_gpu_id .. base_gpu_id + max(1, num_gpus) - 1``.

        Raises:
            ValueError: when a selected device has no free-memory entry.
        """
        if self.is_cpu:
            return None
        by_device = self.platform.available_memory_gib_by_device
        first = args.base_gpu_id
        devices = range(first, first + max(1, args.num_gpus))
        missing = [device for device in devices if device not in by_device]
        if missing:
            raise ValueError(
                "platform.available_memory_gib_by_device: no entry for device(s) "
                f"{missing} (selected devices {first}..{devices[-1]})"
            )
        return min(by_device[device] for device in devices)

    def total_memory_gib(self) -> float:
        """The device's total memory in GiB.

        Raises:
            ValueError: when ``platform.device_total_memory_gib`` was not given.
        """
        total = self.platform.device_total_memory_gib
        if total is None:
            raise ValueError(
                "platform.device_total_memory_gib: required on non-CPU platforms "
                "(offload pre-defaults and the LTX-2 device mode read it)"
            )
        return total
