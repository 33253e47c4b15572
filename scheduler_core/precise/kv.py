"""KV-cache bytes per token and token capacity, as SGLang sizes its pool.

Upstream (``bd3f6a793``): ``python/sglang/srt/mem_cache/kv_cache_dtype.py`` for the
element size, ``model_executor/pool_configurator.py`` for the per-token cell of
each attention kind and ``mem_cache/kv_cache_configurator.py`` for the token
count (budget // cell, rounded down to a whole page, minimum over PP ranks).

* MHA / GQA / MQA: ``kv_heads_per_rank × (head_dim + v_head_dim) × layers × e``
  with ``kv_heads_per_rank = max(1, kv_heads // attention_tp)``;
* MLA (DeepSeek V2/V3, Kimi): ``(kv_lora_rank + qk_rope_head_dim) × layers × e``,
  replicated on every TP rank.

``layers`` is the count on the PP rank holding the most (``ceil(L / pp)``): the
pool is the minimum over ranks. Hybrid sliding-window and Mamba layers are
counted as full attention, which overstates the cell (fewer tokens predicted).
FP4 caches are sized as FP8 (again fewer tokens than SGLang will have).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: ``--kv-cache-dtype`` → bytes per element (``auto`` is resolved from the checkpoint).
_KV_DTYPE_BYTES: Mapping[str, float] = {
    "bf16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "float16": 2,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "mxfp8": 1 + 1 / 32,
    "nvfp4": 1,
    "fp4_mx_block16": 1,
}
#: Model dtype → KV bytes when ``--kv-cache-dtype auto`` and the checkpoint has no FP8 KV.
_MODEL_DTYPE_BYTES: Mapping[str, int] = {"float32": 4, "float": 4}
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


@dataclass(frozen=True, slots=True)
class KvShape:
    """The model's attention layout, as the pool sizing reads it."""

    layers: int
    kv_heads: int
    head_dim: int
    v_head_dim: int
    mla_width: int  # kv_lora_rank + qk_rope_head_dim, 0 for MHA
    element_bytes: float

    @property
    def is_mla(self) -> bool:
        """MLA caches one latent vector per token and layer, replicated over TP."""
        return self.mla_width > 0

    def cell_bytes(self, attention_tp: int, pp: int) -> int:
        """Bytes one token takes in the pool of the fullest rank."""
        layers = -(-self.layers // max(pp, 1))
        if self.is_mla:
            return max(int(self.mla_width * layers * self.element_bytes), 1)
        heads = max(1, self.kv_heads // max(attention_tp, 1))
        return max(int(heads * (self.head_dim + self.v_head_dim) * layers * self.element_bytes), 1)


def page_floor(tokens: int, page_size: int) -> int:
    """Tokens rounded down to a whole page (``(tokens // page) × page``)."""
    page = max(page_size, 1)
    return (max(tokens, 0) // page) * page


def kv_tokens(budget_bytes: float, cell_bytes: int, page_size: int) -> int:
    """SGLang's ``max_total_num_tokens`` for a pool budget (0 when the budget is not positive)."""
    if budget_bytes <= 0:
        return 0
    return page_floor(int(budget_bytes) // cell_bytes, page_size)


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    for path in _TEXT_PATHS:
        node: Any = config
        for key in path:
            node = node.get(key) if isinstance(node, Mapping) else None
        if isinstance(node, Mapping) and node.get("num_attention_heads"):
            return node
    return config


def _positive(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if value > 0 else None


def _kv_heads(text: Mapping[str, Any], heads: int) -> int:
    if text.get("multi_query"):
        return 1
    for key in _KV_HEAD_KEYS:
        found = _positive(text.get(key))
        if found:
            return found
    return heads


def element_bytes(kv_cache_dtype: str, config: Mapping[str, Any], torch_dtype: str) -> float:
    """Bytes per cached element: the flag's dtype, else FP8 when the checkpoint says
    ``kv_cache_quant_algo: FP8``, else the model's dtype (2 bytes for bf16/fp16)."""
    if kv_cache_dtype != "auto":
        return _KV_DTYPE_BYTES.get(kv_cache_dtype, 2)
    quant = config.get("quantization_config")
    if isinstance(quant, Mapping) and str(quant.get("kv_cache_quant_algo", "")).upper() == "FP8":
        return 1
    return _MODEL_DTYPE_BYTES.get(torch_dtype, 2)


def kv_shape(config: Mapping[str, Any] | None, kv_cache_dtype: str, torch_dtype: str) -> KvShape | None:
    """The attention layout of a config.json, None when it lacks layers or heads."""
    if not config:
        return None
    text = _text_config(config)
    layers = _positive(text.get("num_hidden_layers")) or _positive(text.get("n_layer"))
    heads = _positive(text.get("num_attention_heads")) or _positive(text.get("n_head"))
    if layers is None or heads is None:
        return None
    hidden = _positive(text.get("hidden_size")) or 0
    head_dim = _positive(text.get("head_dim")) or (hidden // heads)
    kv_lora = _positive(text.get("kv_lora_rank")) or 0
    rope = _positive(text.get("qk_rope_head_dim")) or 0
    if head_dim <= 0 and not kv_lora:
        return None
    return KvShape(
        layers=layers,
        kv_heads=_kv_heads(text, heads),
        head_dim=head_dim,
        v_head_dim=head_dim,
        mla_width=kv_lora + rope if kv_lora else 0,
        element_bytes=element_bytes(kv_cache_dtype, config, torch_dtype),
    )
