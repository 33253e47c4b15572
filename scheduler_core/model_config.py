"""GPUStack's ``ModelParameters`` from a model's config.json, without a hub.

:func:`model_parameters_from_config` derives what GPUStack's
``ModelParameters.from_model_pretrained_config``
(``policies/candidate_selectors/base_candidate_selector.py``) reads from a
parsed config, working on the plain config.json dict. Bad values raise
:class:`ModelConfigError` naming the field.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from scheduler_core.limits import TOO_DEEP, too_deep

__all__ = ["ModelConfigError", "ModelParameters", "model_parameters_from_config"]

#: Error-field prefix for config.json keys (the model's HF config).
_CONFIG_FIELD = "hf_config"

#: Sub-configs that may hold the decoder, in ``PretrainedConfig.get_text_config`` order.
_TEXT_CONFIG_PATHS: tuple[tuple[str, ...], ...] = (
    ("text_config",),
    ("llm_config",),
    ("language_config",),
    ("thinker_config", "text_config"),
)

#: Where a positive ``num_attention_heads`` is looked up when the text config lacks
#: one (GPUStack ``policies/utils.py: get_model_num_attention_heads``); ``()`` is the root.
_HEAD_FALLBACK_PATHS: tuple[tuple[str, ...], ...] = (
    ("llm_config",),
    ("text_config",),
    (),
    ("thinker_config", "text_config"),
)

#: Context-length keys, the minimum wins (GPUStack ``utils/hub.py: get_max_model_len``).
_MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)

#: ``get_max_model_len`` default when no context-length key exists.
_DEFAULT_MAX_MODEL_LEN = 2048

#: RoPE types whose ``max_position_embeddings`` already includes the extension
#: (``get_max_model_len``: no factor applied).
_UNSCALED_ROPE_TYPES = frozenset({"su", "longrope", "llama3"})

#: MoE expert-count aliases, first present wins (GPUStack
#: ``ModelParameters.from_model_pretrained_config``); the field's own name comes first
#: because that method copies every ``ModelParameters`` field before trying the aliases.
_MOE_EXPERT_KEYS = ("moe_num_experts", "n_routed_experts", "num_local_experts", "num_experts")
_MOE_SHARED_EXPERT_KEYS = ("moe_num_shared_experts", "n_shared_experts", "num_shared_experts")

#: ``ModelParameters.torch_dtype`` default (GPUStack dataclass default).
_DEFAULT_TORCH_DTYPE = "bfloat16"

#: Longest value excerpt quoted in an error message.
_EXCERPT_CHARS = 40


class ModelConfigError(ValueError):
    """A config.json value has the wrong type or an impossible value.

    Attributes:
        field: dotted path of the value inside the config, for example
            ``hf_config.text_config.num_attention_heads``.
        message: what is wrong with it.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class ModelParameters:
    """GPUStack's ``ModelParameters``: the decoder-side hyperparameters of a model.

    Mapping-valued fields are read-only deep copies of the config, so a
    ``ModelParameters`` shares nothing mutable with its input; they are left
    out of ``hash()`` (equality still compares them).
    """

    architectures: tuple[str, ...] = ()
    derived_max_seq_len: int | None = None
    num_hidden_layers: int | None = None
    hidden_size: int | None = None
    vocab_size: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int = 1
    n_group: int | None = None
    head_dim: int | None = None
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    torch_dtype: str = _DEFAULT_TORCH_DTYPE
    quantize: str | None = None
    quantization_config: Mapping[str, Any] | None = field(default=None, hash=False)
    moe_num_experts: int | None = None
    moe_num_shared_experts: int | None = None
    moe_intermediate_size: int | None = None
    is_multimodel: bool = False
    vision_config: Mapping[str, Any] | None = field(default=None, hash=False)
    vision_num_attention_heads: int | None = None


@dataclass(frozen=True, slots=True)
class _Section:
    """One JSON object of the config together with its dotted path (for error fields)."""

    values: Mapping[str, Any]
    path: str

    def field_name(self, key: str) -> str:
        return f"{self.path}.{key}"

    def has(self, key: str) -> bool:
        return self.values.get(key) is not None

    def section(self, key: str) -> _Section | None:
        """The sub-object under ``key``; None when absent or null.

        Raises:
            ModelConfigError: the value is not a JSON object.
        """
        value = self.values.get(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise ModelConfigError(self.field_name(key), f"expected an object, got {_excerpt(value)}")
        return _Section(value, self.field_name(key))

    def descend(self, keys: tuple[str, ...]) -> _Section | None:
        """Follow ``keys`` through nested objects; None as soon as one is absent."""
        section: _Section | None = self
        for key in keys:
            if section is None:
                return None
            section = section.section(key)
        return section

    def integer(self, key: str) -> int | None:
        return _as_int(self.values.get(key), self.field_name(key))

    def positive_int(self, key: str) -> int | None:
        """The integer under ``key`` when it is > 0; None when absent or not positive."""
        value = self.integer(key)
        return value if value is not None and value > 0 else None

    def positive_number(self, key: str) -> float | None:
        return _as_positive_number(self.values.get(key), self.field_name(key))

    def text(self, key: str) -> str | None:
        value = self.values.get(key)
        if value is None or isinstance(value, str):
            return value
        raise ModelConfigError(self.field_name(key), f"expected a string, got {_excerpt(value)}")

    def frozen_copy(self) -> Mapping[str, Any]:
        return MappingProxyType(copy.deepcopy(dict(self.values)))


def _excerpt(value: object) -> str:
    if isinstance(value, int) and abs(value) > _MAX_CONFIG_INT:
        return "an integer out of range"
    text = repr(value)
    return text if len(text) <= _EXCERPT_CHARS else text[: _EXCERPT_CHARS - 3] + "..."


#: Largest magnitude of a config number (a signed 64-bit integer): no real hyperparameter
#: comes near, and larger values overflow the float arithmetic that reads them.
_MAX_CONFIG_INT = 2**63 - 1


def _as_int(value: object, field_name: str) -> int | None:
    """None stays None; ints and integral floats become ints; anything else raises."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > _MAX_CONFIG_INT:
            raise ModelConfigError(field_name, "expected an integer, got one out of range")
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) <= _MAX_CONFIG_INT:
        return int(value)
    raise ModelConfigError(field_name, f"expected an integer, got {_excerpt(value)}")


def _as_positive_number(value: object, field_name: str) -> float | None:
    """None stays None; finite numbers > 0 pass; anything else raises."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if 0 < value <= _MAX_CONFIG_INT and math.isfinite(value):
            return value
    raise ModelConfigError(field_name, f"expected a positive number, got {_excerpt(value)}")


def model_parameters_from_config(
    config: Mapping[str, Any] | None, *, is_llm: bool, typed: bool = True
) -> ModelParameters:
    """Derive GPUStack's ``ModelParameters`` from a config.json dict (``from_model_pretrained_config``).

    The text (decoder) sub-config is the first of ``text_config``,
    ``llm_config``, ``language_config`` and ``thinker_config.text_config`` that
    is an object with ``num_attention_heads``; otherwise the root. Every field
    is read from it, with these exceptions:

    * ``architectures`` comes from the root (the served model), falling back to
      the text sub-config only when the root has none.
    * ``torch_dtype`` (also read from transformers v5's ``dtype``) and
      ``quantization_config`` describe the whole checkpoint and fall back to
      the root.
    * ``is_multimodel``, ``vision_config`` and ``vision_num_attention_heads``
      come from the root ``vision_config``; ``derived_max_seq_len`` is always
      computed (see :func:`_max_model_len`).
    * ``num_attention_heads`` is a positive int or None; when the text config
      has none, ``llm_config``, ``text_config``, the root and
      ``thinker_config.text_config`` are tried in that order.
    * ``head_dim`` defaults to ``hidden_size // num_attention_heads``.
    * MoE counts fall back to the aliases ``n_routed_experts``,
      ``num_local_experts``, ``num_experts`` / ``n_shared_experts``,
      ``num_shared_experts``. A per-modality list (ERNIE-4.5-VL's
      ``[text, vision]``) yields its first, text-side entry.

    A plain dict carries no class defaults, so absent keys stay None (for
    example ``num_key_value_heads`` is then 1, as in GPUStack). The input is
    never mutated; the function is pure.

    Args:
        config: the parsed config.json, or None when the model has none.
        is_llm: the model is in the LLM category (empty categories count).
            GPUStack raises for an LLM only when ``get_text_config`` yields
            None, which a dict config cannot do (the root is the fallback), so
            the flag does not change the result; it is kept so callers state
            the category, as upstream does.

    Returns:
        The derived parameters; ``ModelParameters()`` when ``config`` is None
        (whatever the category: the caller decides whether a config-less
        model can be placed).

    Raises:
        ModelConfigError: the config is not an object, or a value has the
            wrong type or an impossible value (a non-positive context length).
    """
    if config is None:
        return ModelParameters()
    if not isinstance(config, Mapping):
        raise ModelConfigError(_CONFIG_FIELD, f"expected an object, got {_excerpt(config)}")
    if too_deep(config):
        raise ModelConfigError(_CONFIG_FIELD, TOO_DEEP)
    root = _Section(config, _CONFIG_FIELD)
    text = _text_section(root)
    heads = _num_attention_heads(root, text)
    hidden_size = text.integer("hidden_size")
    vision = root.section("vision_config")
    return ModelParameters(
        architectures=_architectures(root, text),
        derived_max_seq_len=_max_model_len(text),
        num_hidden_layers=text.integer("num_hidden_layers"),
        hidden_size=hidden_size,
        vocab_size=text.integer("vocab_size"),
        num_attention_heads=heads,
        num_key_value_heads=_with_default(text.integer("num_key_value_heads"), 1),
        n_group=text.integer("n_group"),
        head_dim=_head_dim(text, hidden_size, heads),
        q_lora_rank=text.integer("q_lora_rank"),
        kv_lora_rank=text.integer("kv_lora_rank"),
        qk_rope_head_dim=text.integer("qk_rope_head_dim"),
        qk_nope_head_dim=text.integer("qk_nope_head_dim"),
        v_head_dim=text.integer("v_head_dim"),
        torch_dtype=_torch_dtype(root, text),
        quantize=text.text("quantize"),
        quantization_config=_quantization_config(root, text),
        moe_num_experts=_first_moe_int(text, _MOE_EXPERT_KEYS),
        moe_num_shared_experts=_first_moe_int(text, _MOE_SHARED_EXPERT_KEYS),
        moe_intermediate_size=_first_moe_int(text, ("moe_intermediate_size",)),
        is_multimodel=vision is not None,
        vision_config=_vision_sizes(root, vision, typed),
        vision_num_attention_heads=None if vision is None else _vision_heads(vision),
    )


def _vision_sizes(root: _Section, vision: _Section | None, typed: bool) -> Mapping[str, Any] | None:
    """The vision sub-config as the fraction calculator reads it.

    GPUStack reads the ViT size with ``getattr`` on the parsed config. Only a
    config parsed by its model's own class (transformers' ``AutoConfig``, which
    needs ``model_type``) has ``vision_config`` as an object with attributes.
    GPUStack parses a plain ``PretrainedConfig.from_dict`` instead when
    ``AutoConfig`` refuses the config (no ``model_type``) and when a local-path
    model's config.json is read from the workers
    (``scheduler/calculator.py: get_pretrained_config_with_workers``); there
    ``vision_config`` stays a dict, ``getattr`` finds none of its keys, and the
    ViT counts as ViT-L/14 (``sglang_resource_fit_selector.py:
    _cal_mem_fraction_static`` step 3). The empty view returned then
    reproduces that; the vision heads are still read from the dict, as
    upstream's ``get_model_vision_num_attention_heads`` does.
    """
    if vision is None:
        return None
    for key in ("num_hidden_layers", "depth", "hidden_size"):  # what the calculator reads
        vision.integer(key)
    if not typed or not root.has("model_type"):
        return MappingProxyType({})
    return vision.frozen_copy()


def _with_default(value: int | None, default: int) -> int:
    return default if value is None else value


def _text_section(root: _Section) -> _Section:
    """``get_text_config`` for a dict: the first sub-config with heads, else the root."""
    for keys in _TEXT_CONFIG_PATHS:
        section = root.descend(keys)
        if section is not None and section.has("num_attention_heads"):
            return section
    return root


def _num_attention_heads(root: _Section, text: _Section) -> int | None:
    """The text config's positive head count, else GPUStack's fallback chain."""
    fallbacks = (root.descend(keys) for keys in _HEAD_FALLBACK_PATHS)  # lazy: stop at a hit
    for section in itertools.chain((text,), fallbacks):
        heads = None if section is None else section.positive_int("num_attention_heads")
        if heads is not None:
            return heads
    return None


def _vision_heads(vision: _Section) -> int | None:
    """Vision heads (``num_attention_heads`` or ``num_heads``) plus InternViT dummy heads."""
    heads = vision.positive_int("num_attention_heads") or vision.positive_int("num_heads")
    if heads is None:
        return None
    dummy_heads = vision.integer("num_dummy_heads") or 0
    return heads + max(dummy_heads, 0)


def _head_dim(text: _Section, hidden_size: int | None, heads: int | None) -> int | None:
    explicit = text.integer("head_dim")
    if explicit is not None or hidden_size is None or heads is None:
        return explicit
    return hidden_size // heads


def _architectures(root: _Section, text: _Section) -> tuple[str, ...]:
    for section in (root, text):
        value = section.values.get("architectures")
        if value is None:
            continue
        names = value if isinstance(value, list | tuple) else None
        if names is None or not all(isinstance(name, str) for name in names):
            raise ModelConfigError(
                section.field_name("architectures"),
                f"expected a list of strings, got {_excerpt(value)}",
            )
        return tuple(names)
    return ()


def _torch_dtype(root: _Section, text: _Section) -> str:
    for section in (text, root):
        for key in ("torch_dtype", "dtype"):
            value = section.text(key)
            if value is not None:
                return value
    return _DEFAULT_TORCH_DTYPE


def _quantization_config(root: _Section, text: _Section) -> Mapping[str, Any] | None:
    for section in (text, root):
        found = section.section("quantization_config")
        if found is not None:
            return found.frozen_copy()
    return None


def _first_moe_int(text: _Section, keys: tuple[str, ...]) -> int | None:
    """The first present key among ``keys``; a list value yields its first entry."""
    for key in keys:
        value = text.values.get(key)
        if isinstance(value, list | tuple) and value:
            return _as_int(value[0], f"{text.field_name(key)}[0]")
        if value is not None:
            return _as_int(value, text.field_name(key))
    return None


def _max_model_len(text: _Section) -> int:
    """GPUStack's ``get_max_model_len`` on the text config.

    The minimum of the context-length keys present (default 2048), then RoPE
    scaling from ``rope_scaling`` (or transformers v5's ``rope_parameters``):
    types ``su``, ``longrope`` and ``llama3`` are left alone; any other type
    multiplies by ``factor`` (1.0 when absent, as for ``default``/``mrope``);
    ``yarn`` first restarts from ``original_max_position_embeddings`` (kept
    as is when that key is absent, matching transformers' default).
    """
    lengths = [value for key in _MAX_LEN_KEYS if (value := text.positive_number(key)) is not None]
    derived = min(lengths) if lengths else _DEFAULT_MAX_MODEL_LEN
    rope = text.section("rope_scaling") or text.section("rope_parameters")
    if rope is None:
        return int(derived)
    rope_type = rope.text("rope_type") or rope.text("type")
    if rope_type in _UNSCALED_ROPE_TYPES:
        return int(derived)
    if rope_type == "yarn":
        derived = rope.positive_number("original_max_position_embeddings") or derived
    return int(derived * (rope.positive_number("factor") or 1.0))
