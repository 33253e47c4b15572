"""The weight bytes SGLang holds on each rank, from the checkpoint's size and its config.

SGLang constructs the model on every rank before it sizes the KV pool, so the pool loses
what the rank holds, not ``checkpoint / (tp·pp)``. From the config this module splits the
checkpoint into parts (parameter counts of the architecture, scaled so they add up to the
checkpoint's real size) and places them as SGLang does:

* **PP** (``distributed/utils.py: get_pp_indices``): ``L // pp`` layers per stage, the
  last ``L mod pp`` stages one more; the embedding on the first stage, the final norm and
  the LM head on the last (a tied head is a second copy there when pp > 1);
* **TP**: projections, experts and the padded vocabulary (multiple of 64,
  ``DEFAULT_VOCAB_PADDING_SIZE``) split over TP (over the attention TP under DP attention);
  K/V projections keep one head per rank when TP exceeds the KV heads; norms, the MoE
  router (``MoEGate``) and MLA's down-projections (``ReplicatedLinear`` in
  ``models/deepseek_v2.py``) are whole on every rank;
* **MTP** layers (``num_nextn_predict_layers``, stored after the last layer with copies of
  the embedding and the head, DeepSeek-V3's layout) are never constructed unless speculative
  decoding drafts with them (then on the last stage, without the copies);
* **dtype** (``configs/model_config.py: _get_and_verify_dtype``): unquantized parts run in
  SGLang's dtype; a float32 checkpoint runs as float16 (bfloat16 for Gemma) and holds half
  its bytes. FP8 checkpoints store linear weights in one byte (plus a float32 scale per
  128 × 128 block) and the rest in the config's dtype.

When the config lacks what the split needs (or the weights came from
``GPUSTACK_MODEL_VRAM_CLAIM``), each rank holds ``checkpoint / (tp·pp)``. LoRA bytes are
split over the ranks likewise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler_core.precise.kv import positive, text_config
from scheduler_core.precise.startup import DTYPE_BYTES, MLA_ARCHITECTURES, config_dtype

#: The config keys the parts derive from (an anatomy's identity).
_SIGNATURE_KEYS = frozenset(
    {
        "hidden_size", "vocab_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "head_dim", "intermediate_size", "moe_intermediate_size", "n_routed_experts", "num_experts",
        "num_local_experts", "moe_num_experts", "n_shared_experts", "first_k_dense_replace", "q_lora_rank",
        "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "num_nextn_predict_layers",
        "model_type", "max_position_embeddings", "type_vocab_size",
    }
)  # fmt: skip
#: Models whose MLP is two matrices (up, down) instead of a gated three.
_UNGATED_MLP = (
    "bert", "roberta", "xlm-roberta", "gpt2", "gpt_neox", "gpt_bigcode", "falcon", "phi", "opt", "bloom"
)  # fmt: skip
#: Encoders with learned absolute position embeddings.
_LEARNED_POSITIONS = ("bert", "roberta", "xlm-roberta")
#: ``VocabParallelEmbedding`` pads the vocabulary to a multiple of this.
_VOCAB_PAD = 64
#: FP8 block quantization: one float32 scale per 128 × 128 block of a linear weight.
_FP8_BYTES_PER_PARAM = 1 + 4 / (128 * 128)


@dataclass(frozen=True, slots=True)
class Layer:
    """One decoder layer's parameters: split over TP (attention and the rest), and whole."""

    attention: float
    kv: float  # K/V projection rows per KV head × heads (replicated when tp > heads)
    kv_heads: int
    ffn: float
    whole: float
    norms: float  # unquantized even in an FP8 checkpoint


@dataclass(frozen=True, slots=True)
class Sums:
    """A run of layers of at most two kinds: ``first`` for the layers before ``boundary`` (the
    dense layers of DeepSeek-style MoE), ``later`` after it. A span's parameters are closed-form,
    so a config naming a billion layers costs nothing."""

    first: Layer
    later: Layer
    boundary: int

    def span(self, start: int, stop: int) -> Layer:
        """The layers ``start … stop−1`` added up (``kv_heads`` left 0: the caller knows them)."""
        early = max(0, min(stop, self.boundary) - min(start, self.boundary))
        late = max(stop - start, 0) - early

        def total(part: str) -> float:
            return float(early * getattr(self.first, part) + late * getattr(self.later, part))

        return Layer(total("attention"), total("kv"), 0, total("ffn"), total("whole"), total("norms"))


@dataclass(frozen=True, slots=True)
class Anatomy:
    """A checkpoint's parameters by where SGLang puts them.

    Equality and hashing use ``signature`` (the config values the parts derive from) only: the
    parts are a function of it, and hashing them would cost every rule look-up.
    """

    signature: tuple[Any, ...]
    embed: float = field(compare=False)
    head: float = field(compare=False)  # 0 when tied or when the model has no LM head (an encoder)
    positions: float = field(compare=False)  # learned positions of an encoder, whole on the first stage
    vocab_rows: int = field(compare=False)
    kv_heads: int = field(compare=False)
    layers: Sums = field(compare=False)
    count: int = field(compare=False)
    mtp: Sums = field(compare=False)
    mtp_count: int = field(compare=False)
    mtp_copies: float = field(compare=False)  # the MTP block's embedding and head copies
    tied: bool = field(compare=False)


def _attention(text: Mapping[str, Any], hidden: int, mla: bool) -> tuple[float, float, int, float]:
    """(split, kv rows × hidden, kv heads, whole) parameters of one attention block."""
    heads = positive(text.get("num_attention_heads")) or 1
    if mla:
        rope = positive(text.get("qk_rope_head_dim")) or 0
        nope = positive(text.get("qk_nope_head_dim")) or 0
        v = positive(text.get("v_head_dim")) or nope
        q_lora = positive(text.get("q_lora_rank")) or 0
        kv_lora = positive(text.get("kv_lora_rank")) or 0
        q_in = q_lora or hidden
        split = heads * (nope + rope) * q_in + heads * (nope + v) * kv_lora + heads * v * hidden
        whole = (q_lora + kv_lora + rope) * hidden + q_lora + kv_lora
        return split, 0.0, 1, whole
    head_dim = positive(text.get("head_dim")) or hidden // heads
    kv_heads = positive(text.get("num_key_value_heads")) or heads
    return 2 * heads * head_dim * hidden, 2 * kv_heads * head_dim * hidden, kv_heads, 0.0


def _experts(text: Mapping[str, Any]) -> int:
    for key in ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts"):
        found = positive(text.get(key))
        if found:
            return found
    return 0


def _ffn(text: Mapping[str, Any], hidden: int, moe: bool) -> tuple[float, float]:
    """(split, whole) parameters of one feed-forward block."""
    if not moe:
        matrices = 2.0 if text.get("model_type") in _UNGATED_MLP else 3.0
        return matrices * hidden * (positive(text.get("intermediate_size")) or 0), 0.0
    experts = _experts(text)
    size = positive(text.get("moe_intermediate_size")) or positive(text.get("intermediate_size")) or 0
    shared = positive(text.get("n_shared_experts")) or 0
    return 3.0 * hidden * size * (experts + shared), float(experts * hidden)


def _layer(text: Mapping[str, Any], index: int, hidden: int, mla: bool) -> Layer:
    moe = _experts(text) > 0 and index >= (positive(text.get("first_k_dense_replace")) or 0)
    split, kv, kv_heads, whole = _attention(text, hidden, mla)
    ffn, router = _ffn(text, hidden, moe)
    return Layer(split, kv, kv_heads, ffn, whole, router + 2 * hidden)


def anatomy(config: Mapping[str, Any] | None, architectures: tuple[str, ...]) -> Anatomy | None:
    """The parts of a decoder checkpoint (None when the config lacks sizes)."""
    if not config:
        return None
    text = text_config(config)
    hidden, vocab = positive(text.get("hidden_size")), positive(text.get("vocab_size"))
    count = positive(text.get("num_hidden_layers"))
    if not (hidden and vocab and count and positive(text.get("num_attention_heads"))):
        return None
    mla = any(arch in MLA_ARCHITECTURES for arch in architectures)
    dense_count = positive(text.get("first_k_dense_replace")) or 0
    first, later = _layer(text, 0, hidden, mla), _layer(text, max(dense_count, 1), hidden, mla)
    extra = positive(text.get("num_nextn_predict_layers")) or 0
    drafted = _mtp_layer(text, count, hidden, mla)
    tied = bool(text.get("tie_word_embeddings") or config.get("tie_word_embeddings"))
    embed = float(vocab * hidden)
    head = 0.0 if tied or _encoder(architectures) else embed
    signature = (
        architectures,
        tuple(sorted((key, repr(value)) for key, value in text.items() if key in _SIGNATURE_KEYS)),
        tied,
    )
    return Anatomy(
        signature, embed, head, _positions(text, hidden), vocab, first.kv_heads,
        Sums(first, later, dense_count), count, Sums(drafted, drafted, 0), extra, 2 * embed * extra, tied,
    )  # fmt: skip


def _encoder(architectures: tuple[str, ...]) -> bool:
    """A bare encoder (``XLMRobertaModel``, ``BertModel``, ...): SGLang builds no LM head."""
    return bool(architectures) and architectures[0].endswith("Model")


def _positions(text: Mapping[str, Any], hidden: int) -> float:
    """BERT-style encoders learn absolute positions and token types (``nn.Embedding``, whole)."""
    if text.get("model_type") not in _LEARNED_POSITIONS:
        return 0.0
    rows = (positive(text.get("max_position_embeddings")) or 0) + (positive(text.get("type_vocab_size")) or 0)
    return float(rows * hidden)


def _mtp_layer(text: Mapping[str, Any], index: int, hidden: int, mla: bool) -> Layer:
    """An MTP block: a decoder layer plus its ``eh_proj`` (stored unquantized) and norms."""
    base = _layer(text, index, hidden, mla)
    return Layer(
        base.attention, base.kv, base.kv_heads, base.ffn, base.whole, base.norms + 2 * hidden**2 + 3 * hidden
    )


@dataclass(frozen=True, slots=True)
class Placement:
    """How a checkpoint is cut: tp (attention tp), pp, and what SGLang constructs."""

    tp: int
    attention_tp: int
    pp: int
    mtp: bool


def stage_layers(layers: int, pp: int) -> list[range]:
    """The layers of each PP stage (``get_pp_indices``: the last ``L mod pp`` stages hold one more)."""
    pp = max(pp, 1)
    base, extra = divmod(layers, pp)
    stages, start = [], 0
    for rank in range(pp):
        size = base + (1 if rank >= pp - extra else 0)
        stages.append(range(start, start + size))
        start += size
    return stages


@dataclass(frozen=True, slots=True)
class Rates:
    """Bytes per parameter: stored and running, for linear weights and for the rest."""

    linear_stored: float
    plain_stored: float
    linear_running: float
    plain_running: float


def rates(config: Mapping[str, Any], running: str) -> Rates:
    """Bytes per parameter of a checkpoint whose weights SGLang runs in ``running``."""
    text = text_config(config)
    quant = config.get("quantization_config") or text.get("quantization_config")
    stored = DTYPE_BYTES.get(config_dtype(text) or config_dtype(config) or running, 2)
    now = DTYPE_BYTES.get(running, 2)
    if isinstance(quant, Mapping) and quant:
        linear = _FP8_BYTES_PER_PARAM if str(quant.get("quant_method", "")).lower() == "fp8" else 0.5
        return Rates(linear, stored, linear, now)
    return Rates(stored, stored, now, now)


def _rank_params(layers: Layer, kv_heads: int, placement: Placement) -> tuple[float, float]:
    """(linear, plain) parameters one rank holds of ``layers`` (a span added up)."""
    kv = max(1, kv_heads // placement.attention_tp) * layers.kv / max(kv_heads, 1)
    linear = layers.attention / placement.attention_tp + kv + layers.ffn / placement.tp + layers.whole
    return linear, layers.norms


def _scale(body: Anatomy, checkpoint: int, rate: Rates) -> float:
    """Checkpoint bytes per modeled byte: the parts scaled to add up to the real size."""
    every = (body.layers.span(0, body.count), body.mtp.span(0, body.mtp_count))
    linear = sum(part.attention + part.kv + part.ffn + part.whole for part in every)
    plain = sum(part.norms for part in every) + body.embed + body.head + body.positions + body.mtp_copies
    modeled = linear * rate.linear_stored + plain * rate.plain_stored
    return checkpoint / modeled if modeled > 0 else 0.0


def rank_weights(body: Anatomy, checkpoint: int, rate: Rates, placement: Placement) -> list[int]:
    """Bytes SGLang holds on one rank of each PP stage, the checkpoint's size apportioned."""
    scale = _scale(body, checkpoint, rate)
    padded = -(-body.vocab_rows // _VOCAB_PAD) * _VOCAB_PAD / body.vocab_rows
    vocab = body.embed * padded / placement.attention_tp
    stages = stage_layers(body.count, placement.pp)
    drafted = _rank_params(body.mtp.span(0, body.mtp_count), body.kv_heads, placement)
    result = []
    for index, stage in enumerate(stages):
        first, last = index == 0, index == len(stages) - 1
        linear, plain = _rank_params(body.layers.span(stage.start, stage.stop), body.kv_heads, placement)
        if last and placement.mtp:
            linear, plain = linear + drafted[0], plain + drafted[1]
        copies = int(first) + int(last and body.head > 0) + int(last and body.tied and not first)
        plain += vocab * copies + (body.positions if first else 0.0)
        result.append(int(scale * (linear * rate.linear_running + plain * rate.plain_running)))
    return result
