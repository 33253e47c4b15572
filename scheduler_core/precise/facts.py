"""What the precise rules know about a request, built once per decision (hashable).

:class:`PreciseFacts` is the signature every precise per-worker rule shares: weights and
where SGLang puts them, attention layout, SGLang flags, the KV floor, sharing and the
settings. Building it also rejects the arguments SGLang would refuse to start with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler_core._schemas import ScheduleRequest
from scheduler_core.cycle import CycleState, DecisionInputs
from scheduler_core.errors import RequestError
from scheduler_core.estimate import ModelFacts, vram_claim_override
from scheduler_core.params import BackendParameters
from scheduler_core.precise.fraction import ModelTraits, RuntimeFlags
from scheduler_core.precise.kv import KvShape, kv_shape, text_config
from scheduler_core.precise.settings import PreciseSettings
from scheduler_core.precise.startup import (
    MULTIMODAL_BREAKABLE,
    MULTIMODAL_PIECEWISE,
    PIECEWISE_DISABLED,
    balance_checked,
    context_length,
    fatal_argument,
    is_multimodal,
    running_dtype,
)
from scheduler_core.precise.weights import (
    Anatomy,
    Placement,
    Rates,
    anatomy,
    rank_weights,
    rates,
    stage_layers,
)
from scheduler_core.selection import Selection
from scheduler_core.sglang_args import DP_NAMES, PP_NAMES, TP_NAMES

_DEEPSEEK_V4 = ("DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMNextN", "DeepseekV4ForCausalLMDSpark")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The weights and how to cut them (``anatomy`` None: an even split over the ranks)."""

    weight_bytes: int  # the checkpoint alone
    lora_bytes: int
    anatomy: Anatomy | None
    rates: Rates | None  # bytes per parameter, stored and as SGLang runs them

    def stage_weights(self, tp: int, attention_tp: int, pp: int, mtp: bool) -> tuple[int, ...]:
        """Bytes one rank of each PP stage holds (LoRA adapters split over all ranks)."""
        lora = -(-self.lora_bytes // max(tp * pp, 1))
        if self.anatomy is None or self.rates is None:
            even = -(-self.weight_bytes // max(tp * pp, 1))
            return tuple(even + lora for _ in range(max(pp, 1)))
        placement = Placement(tp, attention_tp, pp, mtp)
        held = rank_weights(self.anatomy, self.weight_bytes, self.rates, placement)
        return tuple(rank + lora for rank in held)


@dataclass(frozen=True, slots=True)
class PreciseFacts:
    """Every decision input of the precise rules.

    Attributes:
        weight_bytes: checkpoint plus LoRA bytes (the ``GPUSTACK_MODEL_VRAM_CLAIM``
            value when the weights are unknown, else 0 with ``weight_known`` False).
        checkpoint: the same weights with what places them on ranks.
        kv: the attention layout (None: no config, no KV prediction).
        traits / flags: what SGLang's memory rules read.
        floor_tokens: the KV floor every rank's pool must hold.
        min_kv_tokens: the least predicted capacity the request accepts.
        sharing: right-size the fraction (rule 8).
        tp / pp / dp: the user's parallel sizes (None when not given).
        balance_check: SGLang checks its TP ranks' memory balance at start-up.
        diffusion: an IMAGE model (no fraction, no KV; a full copy per GPU).
    """

    weight_bytes: int
    weight_known: bool
    checkpoint: Checkpoint
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
    balance_check: bool
    diffusion: bool

    def attention_tp(self, tp: int) -> int:
        """The attention TP size: tp divided by dp under DP attention."""
        if self.flags.enable_dp_attention and self.dp > 1:
            return max(tp // self.dp, 1)
        return tp

    def stage_cells(self, tp: int, pp: int) -> tuple[int, ...] | None:
        """KV bytes per token on a rank of each PP stage (None without a layout)."""
        if self.kv is None:
            return None
        stages = stage_layers(self.kv.layers, pp)
        return tuple(self.kv.cell_bytes(self.attention_tp(tp), len(stage)) for stage in stages)

    def cell_bytes(self, tp: int, pp: int) -> int | None:
        """KV bytes per token on the fullest rank (None without a layout)."""
        cells = self.stage_cells(tp, pp)
        return None if cells is None else max(cells)

    def stage_weights(self, tp: int, pp: int) -> tuple[int, ...]:
        """Weight bytes a rank of each PP stage holds (a diffusion model: a full copy)."""
        if self.diffusion:
            return (self.weight_bytes,)
        return self.checkpoint.stage_weights(tp, self.attention_tp(tp), pp, self.flags.drafts_with_mtp)

    def replicas(self) -> int:
        """Full model copies a placement holds (dp, unless DP attention shares the TP group)."""
        return 1 if self.flags.enable_dp_attention else self.dp


def _weights(request: ScheduleRequest, facts: ModelFacts) -> tuple[int, int, bool]:
    """(checkpoint bytes, LoRA bytes, known); the VRAM-claim override stands for the checkpoint."""
    if facts.weight_bytes is not None:
        return facts.weight_bytes, facts.lora_bytes, True
    override = vram_claim_override(request.model)
    if override is not None:
        return max(override, 0), facts.lora_bytes, True
    return 0, facts.lora_bytes, False


def _model_path(request: ScheduleRequest) -> str:
    model = request.model
    return model.local_path or model.huggingface_repo_id or model.model_scope_model_id or model.name


def _traits(
    config: Mapping[str, Any] | None, architectures: tuple[str, ...], flags: RuntimeFlags, kv: KvShape | None
) -> ModelTraits:
    text = text_config(config or {})
    multimodal = is_multimodal(architectures, config or {}, flags.enable_multimodal)
    vision = (config or {}).get("vision_config")
    return ModelTraits(
        mla=kv is not None and kv.is_mla,
        multimodal=multimodal,
        vision_config=vision if isinstance(vision, Mapping) else None,
        context_len=flags.context_length or context_length(text),
        kv_heads=0 if kv is None else kv.kv_heads,
        multimodal_piecewise=multimodal and any(a in MULTIMODAL_PIECEWISE for a in architectures),
        multimodal_breakable=multimodal and any(a in MULTIMODAL_BREAKABLE for a in architectures),
        piecewise_disabled=any(a in PIECEWISE_DISABLED for a in architectures),
        deepseek_v4=any(a in _DEEPSEEK_V4 for a in architectures),
    )


def _default_floor(traits: ModelTraits, flags: RuntimeFlags, settings: PreciseSettings) -> int:
    """The model's context, capped at ``kv_floor_cap`` and at the pool the user caps
    (``--max-total-tokens``): a floor no pool may hold would refuse every placement."""
    floor = min(traits.context_len, settings.kv_floor_cap)
    return floor if flags.max_total_tokens is None else max(min(floor, flags.max_total_tokens), 1)


def _reject_fatal(
    params: BackendParameters, config: Mapping[str, Any] | None, env: Mapping[str, str] | None
) -> None:
    reason = fatal_argument(params, None if config is None else text_config(config), env)
    if reason is not None:
        raise RequestError("model.backend_parameters", reason, "invalid_backend_parameters")


def prepare(inputs: DecisionInputs, state: CycleState) -> PreciseFacts:
    """The decision's :class:`PreciseFacts`, built once however many precise strategies ask.

    Raises:
        RequestError: see :func:`precise_facts`.
    """
    return state.prepare(PreciseFacts, lambda: precise_facts(inputs))


def facts_of(selection: Selection) -> PreciseFacts:
    """The facts the chain's precise strategies prepared for this decision."""
    return selection.state.read(PreciseFacts)


def precise_facts(inputs: DecisionInputs) -> PreciseFacts:
    """The precise rules' inputs for one request (the chain's :class:`PreciseSettings`).

    Raises:
        RequestError: ``model.backend_parameters`` holds an argument SGLang refuses to start
            with (its reason as the message).
    """
    request, facts, model_params = inputs.request, inputs.facts, inputs.model_params
    params, settings = inputs.params, inputs.settings.get(PreciseSettings)
    diffusion = "image" in inputs.categories
    config = None if diffusion else facts.hf_config
    env = request.model.env
    if not diffusion:
        _reject_fatal(params, config, env)
    flags = RuntimeFlags.from_parameters(params, bool(request.model.lora_list), _model_path(request))
    architectures = model_params.architectures
    running = running_dtype(text_config(config or {}), flags.dtype)
    kv = kv_shape(config, flags.kv_cache_dtype, running, architectures)
    traits = _traits(config, architectures, flags, kv)
    checkpoint_bytes, lora, known = _weights(request, facts)
    body = anatomy(config, architectures) if facts.weight_bytes is not None else None
    sharing = settings.gpu_sharing if request.gpu_sharing is None else request.gpu_sharing
    return PreciseFacts(
        weight_bytes=checkpoint_bytes + lora,
        weight_known=known,
        checkpoint=Checkpoint(
            checkpoint_bytes, lora, body, None if config is None else rates(config, running)
        ),
        kv=kv,
        traits=traits,
        flags=flags,
        floor_tokens=request.min_context_tokens or _default_floor(traits, flags, settings),
        min_kv_tokens=request.min_kv_tokens,
        sharing=sharing and not diffusion,
        settings=settings,
        tp=params.find_int(TP_NAMES),
        pp=params.find_int(PP_NAMES),
        dp=params.find_int(DP_NAMES) or 1,
        balance_check=balance_checked(env),
        diffusion=diffusion,
    )
