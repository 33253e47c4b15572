"""KV-cache bytes per token and token capacity, as SGLang sizes its pool.

Upstream (sglang 0.5.16): ``mem_cache/kv_cache_dtype.py`` for the element,
``model_executor/pool_configurator.py: DefaultPoolConfigurator._compute_cell_size`` for
the per-token cell of each attention kind and ``mem_cache/kv_cache_configurator.py`` for
the token count (budget // cell, rounded down to a whole page, minimum over PP ranks).

* MHA / GQA / MQA: ``kv_heads_per_rank × (head_dim + v_head_dim) × layers × e`` with
  ``kv_heads_per_rank = max(1, kv_heads // attention_tp)``; ``head_dim`` and
  ``v_head_dim`` as the config names them (``hidden_size // heads`` and ``head_dim``
  otherwise, ``ModelConfig._derive_model_shapes``);
* MLA (the architectures of :data:`~scheduler_core.precise.startup.MLA_ARCHITECTURES`):
  ``(kv_lora_rank + qk_rope_head_dim) × layers × e``, replicated on every TP rank;
* ``e`` is 2 for bfloat16/float16, 4 for float32 (only with ``--dtype float32``: a float32
  config runs as float16), 1 for FP8 (``--kv-cache-dtype fp8_*``, or ``auto`` with a
  checkpoint whose ``kv_cache_quant_algo`` is FP8); ``mxfp8`` adds one scale byte per 32
  elements; FP4 (``nvfp4``, ``fp4_mx_block16``) packs two values a byte and adds a scale
  byte per 16 (plus, for MHA, one shared dequantisation workspace of ``heads × head_dim ×
  2`` bytes).

``layers`` is the count on one PP rank (``get_pp_indices``: the last ``L mod pp`` ranks
hold one more); the pool is the minimum over ranks, so the fullest rank decides. Hybrid
sliding-window and Mamba layers are counted as full attention, which overstates the cell
(fewer tokens predicted) for the architectures SGLang runs as hybrids.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler_core.precise.startup import DTYPE_BYTES, MLA_ARCHITECTURES, kv_element

#: Config keys holding the KV head count, first present wins (``get_total_num_kv_heads``).
_KV_HEAD_KEYS = (
    "n_head_kv",
    "num_kv_heads",
    "num_key_value_heads",
    "multi_query_group_num",
    "num_attention_groups",
)
#: Sub-configs that may hold the decoder (``get_text_config`` order).
_TEXT_PATHS: tuple[tuple[str, ...], ...] = (
    ("text_config",),
    ("llm_config",),
    ("language_config",),
    ("thinker_config", "text_config"),
)
#: Scale block sizes of the FP4 and MXFP8 caches (``_compute_cell_size``).
_FP4_BLOCK, _MXFP8_BLOCK = 16, 32


@dataclass(frozen=True, slots=True)
class KvShape:
    """The model's attention layout and KV element, as the pool sizing reads it."""

    layers: int
    kv_heads: int
    head_dim: int
    v_head_dim: int
    mla_width: int  # kv_lora_rank + qk_rope_head_dim, 0 for MHA
    element: str  # bfloat16, float16, float32, fp8, fp4
    mxfp8: bool = False

    @property
    def is_mla(self) -> bool:
        """MLA caches one latent vector per token and layer, replicated over TP."""
        return self.mla_width > 0

    def cell_bytes(self, attention_tp: int, layers: int) -> int:
        """Bytes one token takes in the pool of a rank holding ``layers`` layers."""
        if self.is_mla:
            return self._mla_cell(layers)
        heads = max(1, self.kv_heads // max(attention_tp, 1))
        if self.element == "fp4":
            full = heads * (self.head_dim + self.v_head_dim) * layers
            scales = (heads * self.head_dim * layers * 2) // _FP4_BLOCK
            return full // 2 + scales + heads * self.head_dim * 2
        cell = heads * (self.head_dim + self.v_head_dim) * layers * _bytes(self.element)
        if self.mxfp8:
            cell += heads * (self.head_dim + self.v_head_dim) * layers // _MXFP8_BLOCK
        return max(cell, 1)

    def _mla_cell(self, layers: int) -> int:
        if self.element == "fp4":
            return (self.mla_width * layers) // 2 + (self.mla_width // _FP4_BLOCK) * layers
        return max(self.mla_width * layers * _bytes(self.element), 1)


def _bytes(element: str) -> int:
    return 1 if element in ("fp8", "fp4") else DTYPE_BYTES.get(element, 2)


def page_floor(tokens: int, page_size: int) -> int:
    """Tokens rounded down to a whole page (``(tokens // page) × page``)."""
    page = max(page_size, 1)
    return (max(tokens, 0) // page) * page


def kv_tokens(budget_bytes: float, cell_bytes: int, page_size: int) -> int:
    """SGLang's ``max_total_num_tokens`` for a pool budget (0 when the budget is not positive)."""
    if budget_bytes <= 0:
        return 0
    return page_floor(int(budget_bytes) // cell_bytes, page_size)


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The decoder sub-config (``get_text_config``): the first with heads, else the root."""
    for path in _TEXT_PATHS:
        node: Any = config
        for key in path:
            node = node.get(key) if isinstance(node, Mapping) else None
        if isinstance(node, Mapping) and node.get("num_attention_heads"):
            return node
    return config


def positive(value: Any) -> int | None:
    """A positive number as an int, else None (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if value > 0 else None


def _kv_heads(text: Mapping[str, Any], heads: int) -> int:
    if text.get("multi_query"):
        return 1
    for key in _KV_HEAD_KEYS:
        found = positive(text.get(key))
        if found:
            return found
    return heads


def fp8_checkpoint_kv(config: Mapping[str, Any]) -> bool:
    """The checkpoint's quantization says ``kv_cache_quant_algo: FP8``."""
    quant = config.get("quantization_config")
    return isinstance(quant, Mapping) and str(quant.get("kv_cache_quant_algo", "")).upper() == "FP8"


def kv_shape(
    config: Mapping[str, Any] | None,
    kv_cache_dtype: str,
    model_dtype: str,
    architectures: tuple[str, ...] = (),
) -> KvShape | None:
    """The attention layout of a config.json, None when it lacks layers or heads.

    ``model_dtype`` is the dtype SGLang runs the weights in (``startup.running_dtype``).
    """
    if not config:
        return None
    text = text_config(config)
    layers = positive(text.get("num_hidden_layers")) or positive(text.get("n_layer"))
    heads = positive(text.get("num_attention_heads")) or positive(text.get("n_head"))
    if layers is None or heads is None:
        return None
    mla = any(arch in MLA_ARCHITECTURES for arch in architectures)
    kv_lora = positive(text.get("kv_lora_rank")) or 0
    rope = positive(text.get("qk_rope_head_dim")) or 0
    hidden = positive(text.get("hidden_size")) or 0
    head_dim = positive(text.get("head_dim")) or (hidden // heads)
    if (mla and not kv_lora) or (not mla and head_dim <= 0):
        return None
    return KvShape(
        layers=layers,
        kv_heads=_kv_heads(text, heads),
        head_dim=head_dim,
        v_head_dim=positive(text.get("v_head_dim")) or head_dim,
        mla_width=kv_lora + rope if mla else 0,
        element=kv_element(kv_cache_dtype, model_dtype, fp8_checkpoint_kv(config)),
        mxfp8=kv_cache_dtype == "mxfp8",
    )
