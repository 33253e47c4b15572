"""What the precise rules know about a request, built once per decision (hashable).

:class:`PreciseFacts` is the signature every precise per-worker rule shares:
weights, attention layout, SGLang flags, the KV floor, sharing and the settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scheduler_core._schemas import ScheduleRequest
from scheduler_core.estimate import ModelFacts, vram_claim_override
from scheduler_core.model_config import ModelParameters
from scheduler_core.params import BackendParameters
from scheduler_core.precise.fraction import ModelTraits, RuntimeFlags
from scheduler_core.precise.kv import KvShape, kv_shape
from scheduler_core.precise.settings import PreciseSettings

#: SGLang's context length when the config names none (``get_max_model_len`` default).
_DEFAULT_CONTEXT = 2048
_TP = ("tp-size", "tensor-parallel-size")
_PP = ("pp-size", "pipeline-parallel-size")
_DP = ("dp-size", "data-parallel-size")


@dataclass(frozen=True, slots=True)
class PreciseFacts:
    """Every decision input of the precise rules.

    Attributes:
        weight_bytes: checkpoint plus LoRA bytes (the ``GPUSTACK_MODEL_VRAM_CLAIM``
            value when the weights are unknown, else 0 with ``weight_known`` False).
        kv: the attention layout (None: no config, no KV prediction).
        traits / flags: what SGLang's memory rules read.
        floor_tokens: the KV floor every rank's pool must hold.
        min_kv_tokens: the least predicted capacity the request accepts.
        sharing: right-size the fraction (rule 8).
        tp / pp / dp: the user's parallel sizes (None when not given).
        diffusion: an IMAGE model (no fraction, no KV; a full copy per GPU).
    """

    weight_bytes: int
    weight_known: bool
    kv: KvShape | None
    traits: ModelTraits
    flags: RuntimeFlags
    floor_tokens: int
    min_kv_tokens: int | None
    sharing: bool
    settings: PreciseSettings
    tp: int | None
    pp: int | None
    dp: int
    diffusion: bool

    def attention_tp(self, tp: int) -> int:
        """The attention TP size: tp divided by dp under DP attention."""
        if self.flags.enable_dp_attention and self.dp > 1:
            return max(tp // self.dp, 1)
        return tp

    def cell_bytes(self, tp: int, pp: int) -> int | None:
        """KV bytes per token on the fullest rank (None without a layout)."""
        return None if self.kv is None else self.kv.cell_bytes(self.attention_tp(tp), pp)

    def replicas(self) -> int:
        """Full model copies a placement holds (dp, unless DP attention shares the TP group)."""
        return 1 if self.flags.enable_dp_attention else self.dp


def _weights(request: ScheduleRequest, facts: ModelFacts) -> tuple[int, bool]:
    if facts.weight_bytes is not None:
        return facts.weight_bytes + facts.lora_bytes, True
    override = vram_claim_override(request.model)
    if override is not None:
        return max(override, 0), True
    return facts.lora_bytes, False


def precise_facts(
    request: ScheduleRequest,
    facts: ModelFacts,
    model_params: ModelParameters,
    params: BackendParameters,
    categories: Sequence[str],
    settings: PreciseSettings,
) -> PreciseFacts:
    """The precise rules' inputs for one request (flags already validated by the selector checks)."""
    flags = RuntimeFlags.from_parameters(params)
    diffusion = "image" in categories
    config = None if diffusion else facts.hf_config
    kv = kv_shape(config, flags.kv_cache_dtype, model_params.torch_dtype)
    context = flags.context_length or model_params.derived_max_seq_len or _DEFAULT_CONTEXT
    traits = ModelTraits(
        mla=kv is not None and kv.is_mla,
        multimodal=model_params.is_multimodel,
        vision_config=model_params.vision_config,
        context_len=context,
        kv_heads=0 if kv is None else kv.kv_heads,
    )
    weights, known = _weights(request, facts)
    sharing = settings.gpu_sharing if request.gpu_sharing is None else request.gpu_sharing
    return PreciseFacts(
        weight_bytes=weights,
        weight_known=known,
        kv=kv,
        traits=traits,
        flags=flags,
        floor_tokens=request.min_context_tokens or min(context, settings.kv_floor_cap),
        min_kv_tokens=request.min_kv_tokens,
        sharing=sharing and not diffusion,
        settings=settings,
        tp=params.find_int(_TP),
        pp=params.find_int(_PP),
        dp=params.find_int(_DP) or 1,
        diffusion=diffusion,
    )
