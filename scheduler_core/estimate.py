"""What a model needs: weight facts, the VRAM estimate and RAM claims.

Formulas are GPUStack's (``policies/utils.py``): ``int((weights + lora) × factor)
+ overhead`` with factor 1.2 (3.0 for text-to-speech) and overhead 2 GiB for
LLMs (512 MiB otherwise); diffusion models claim their weights as they are;
``env.GPUSTACK_MODEL_VRAM_CLAIM`` replaces the estimate. Unlike GPUStack, an
unknown weight size is reported as such (``weight_source == "unknown"``)
instead of silently becoming zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler_core._schemas import ModelSpec
from scheduler_core._units import GIB, MIB
from scheduler_core.model_folder import ModelFolderError, read_local_model

#: Env key GPUStack reads to skip estimation (bytes, an int string).
VRAM_CLAIM_ENV = "GPUSTACK_MODEL_VRAM_CLAIM"
#: EleutherAI "20 % inference overhead" factor GPUStack applies to weights.
WEIGHT_FACTOR = 1.2
#: Text-to-speech models get three times their weights (GPUStack).
TTS_WEIGHT_FACTOR = 3.0
#: Framework overhead for LLMs / other models (GPUStack).
LLM_OVERHEAD = 2 * GIB
OTHER_OVERHEAD = 512 * MIB


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """Everything the engine knows about a model without a hub.

    Attributes:
        hf_config: the model's config.json (request ``hf_config`` first, then the folder).
        weight_bytes: total weight bytes, None when unknown.
        weight_source: where ``weight_bytes`` came from (``request``, ``safetensors_index``,
            ``safetensors_headers``, ``diffusers_components``, ``file_sizes``, ``unknown``).
        lora_bytes: summed LoRA weights (unknown adapters count 0, as upstream).
        typed_config: see the attribute.
        model_index: a diffusers ``model_index.json`` when the folder has one.
        is_diffusers: the folder is a diffusers pipeline.
    """

    hf_config: Mapping[str, Any] | None
    weight_bytes: int | None
    weight_source: str
    lora_bytes: int = 0
    model_index: Mapping[str, Any] | None = None
    is_diffusers: bool = False
    #: The config is parsed by its model's class (GPUStack's ``AutoConfig``), not as a
    #: plain dict (a local-path model whose folder only the workers hold).
    typed_config: bool = True


def vram_claim_override(model: ModelSpec) -> int | None:
    """The ``GPUSTACK_MODEL_VRAM_CLAIM`` env value when it parses as an int, else None."""
    raw = (model.env or {}).get(VRAM_CLAIM_ENV)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def _lora_bytes(model: ModelSpec) -> int:
    total = 0
    for entry in model.lora_list or ():
        if entry.weight_bytes is not None:
            total += entry.weight_bytes
        elif entry.local_path:
            try:
                total += read_local_model(entry.local_path).weight_bytes or 0
            except ModelFolderError:
                continue  # GPUStack counts an unreadable adapter as 0
    return total


def _request_has_config(model: ModelSpec) -> bool:
    """The request carries the config placement reads (IMAGE and text-to-speech models need none)."""
    omni = "image" in model.categories or "text_to_speech" in model.categories
    return model.hf_config is not None or omni


def _source(model: ModelSpec) -> str | None:
    """GPUStack's model source, inferred as its API does when the row carries none."""
    if model.source:
        return model.source
    if model.huggingface_repo_id:
        return "huggingface"
    if model.model_scope_model_id:
        return "model_scope"
    return "local_path" if model.local_path else None


def resolve_model_facts(model: ModelSpec) -> ModelFacts:
    """Gather the model's config and weight size from the request and ``local_path``.

    The request's own ``hf_config`` and ``weight_bytes`` win. The folder is read
    for what they leave out. GPUStack reads a local path on the workers, not
    where it decides, so a folder that cannot be read here is not an error when
    the request carries the config: the weight size is then what the request
    says, or unknown (``weight_source: unknown``; GPUStack counts such a
    model's weights as 0 when it cannot size them).

    Raises:
        ModelFolderError: the folder is needed for the config but cannot be read.
    """
    lora = _lora_bytes(model)
    if not model.local_path:
        source = "request" if model.weight_bytes is not None else "unknown"
        return ModelFacts(model.hf_config, model.weight_bytes, source, lora)
    try:
        folder = read_local_model(model.local_path)
    except ModelFolderError:
        if not _request_has_config(model):
            raise
        # GPUStack reads such a model's config.json from the workers, as a plain dict.
        typed = _source(model) != "local_path"
        source = "request" if model.weight_bytes is not None else "unknown"
        return ModelFacts(model.hf_config, model.weight_bytes, source, lora, typed_config=typed)
    config = model.hf_config if model.hf_config is not None else folder.config
    weight: int | None = folder.weight_bytes
    source = folder.weight_source
    if model.weight_bytes is not None:
        weight, source = model.weight_bytes, "request"
    return ModelFacts(config, weight, source, lora, folder.model_index, folder.is_diffusers)


def is_llm(categories: list[str]) -> bool:
    """GPUStack's ``is_llm_model``: no categories, or ``llm`` among them."""
    return not categories or "llm" in categories


def estimate_vram(model: ModelSpec, categories: list[str], facts: ModelFacts) -> int:
    """GPUStack's VRAM estimate in bytes (``estimate_model_vram`` / diffusion variant)."""
    override = vram_claim_override(model)
    if override is not None:
        return override
    weight = facts.weight_bytes or 0
    if "image" in categories:
        return weight
    factor = TTS_WEIGHT_FACTOR if "text_to_speech" in categories else WEIGHT_FACTOR
    overhead = LLM_OVERHEAD if is_llm(categories) else OTHER_OVERHEAD
    return int((weight + facts.lora_bytes) * factor) + overhead


def model_ram_claim(model: ModelSpec) -> int:
    """GPUStack's ``get_model_ram_claim``: extended-KV ``ram_size`` GiB, else 0."""
    kv = model.extended_kv_cache
    if kv and kv.enabled and kv.ram_size and kv.ram_size > 0:
        return int(kv.ram_size * GIB)
    return 0


@dataclass(frozen=True, slots=True)
class RamClaimRule:
    """GPUStack's ``get_computed_ram_claim``: the RAM a claim records for its VRAM.

    Only the extended KV cache claims RAM: ``ram_size`` GiB, else ``ram_ratio``
    × the claimed VRAM. Hashable, so a rule's inputs can carry it.
    """

    enabled: bool = False
    ram_size: float | None = None
    ram_ratio: float | None = None

    @classmethod
    def of(cls, model: ModelSpec) -> RamClaimRule:
        """The rule of ``model``'s extended KV cache settings."""
        kv = model.extended_kv_cache
        if not kv or not kv.enabled:
            return cls()
        return cls(True, kv.ram_size, kv.ram_ratio)

    def ram_for(self, vram_claim: Mapping[int, int], static_ram: int | None = None) -> int | None:
        """The RAM recorded with ``vram_claim`` (``static_ram``, when given, wins)."""
        if static_ram:
            return static_ram
        if not self.enabled:
            return None
        if self.ram_size:
            return int(self.ram_size * GIB)
        if self.ram_ratio and self.ram_ratio > 0 and vram_claim:
            return int(sum(vram_claim.values()) * self.ram_ratio)
        return None
