"""Checkpoints tensor by tensor, and the bytes SGLang holds of them on each rank.

No GPU is at hand to measure what SGLang loads, so the tests and the simulation take it
from the checkpoint itself: :func:`tensors` lists a Hugging Face checkpoint's tensors
(name, shape, stored dtype) for the architectures the corpus uses, laid out as those
checkpoints are (checked against published totals: Llama-3.1-8B 16,060,522,496 B and
Qwen2.5-7B 15,231,233,024 B exactly, DeepSeek-V3 688,586,727,424 B within 12 MB, see the
tests; its MTP ``eh_proj`` is stored in bfloat16), and
:func:`loaded` sums, for one rank, the tensors SGLang constructs there:

* the layers of the rank's PP stage, from SGLang's own ``get_pp_indices`` (``extra.pp_layers``);
  the embedding on the first stage, the final norm and the LM head on the last (a tied head
  is a second copy on the last stage when pp > 1);
* no multi-token-prediction layer (``model.layers.N`` with N ≥ ``num_hidden_layers``) unless
  speculative decoding drafts with it (``deepseek_weight_loader.py`` skips them otherwise;
  the model never constructs them), nor the MTP block's copies of the embedding and head;
* tensor parallel: column- and row-parallel projections and experts split over TP, the
  vocabulary padded to 64 (``vocab_parallel_embedding.py: DEFAULT_VOCAB_PADDING_SIZE``)
  and split; K/V projections keep at least one head per rank (``QKVParallelLinear``
  replicates KV heads when tp exceeds them); norms, the MoE router (``MoEGate.weight``) and
  MLA's down-projections (``fused_qkv_a_proj_with_mqa``, ``kv_a_proj_with_mqa`` are
  ``ReplicatedLinear`` in ``models/deepseek_v2.py``) whole on every rank;
* unquantized tensors in the dtype SGLang runs (``extra.model_config(...).dtype``, its own
  ``_get_and_verify_dtype``: a float32 checkpoint runs as float16, bfloat16 for Gemma); FP8
  weights and their scales as stored.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import extra

#: Bytes per stored element.
ELEMENT = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}
_CONFIG_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "half": "fp16", "float": "fp32"}
#: The vocabulary padding of ``VocabParallelEmbedding`` (``DEFAULT_VOCAB_PADDING_SIZE``).
VOCAB_PAD = 64
#: FP8 block quantization (``weight_block_size``): one fp32 scale per 128 × 128 block.
BLOCK = 128


@dataclass(frozen=True)
class Tensor:
    """One stored tensor and how SGLang splits it over TP."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    #: ``rows``/``cols``: split on that dimension; ``vocab``: padded rows split; ``kv``: rows are
    #: KV heads (at least one per rank); ``whole``: replicated on every rank.
    split: str
    #: the layer index, or ``embed``/``head``/``final`` (the final norm).
    where: int | str


def _llm(config: Mapping[str, Any]) -> Mapping[str, Any]:
    return extra.text_config(config)


def _stored(config: Mapping[str, Any]) -> str:
    text = _llm(config)
    raw = text.get("torch_dtype") or config.get("torch_dtype") or "float32"
    return _CONFIG_DTYPE[raw]


def _quantized(config: Mapping[str, Any]) -> bool:
    quant = config.get("quantization_config") or {}
    return quant.get("quant_method") == "fp8"


def _linear(
    config: Mapping[str, Any],
    name: str,
    out: int,
    inp: int,
    split: str,
    where: int | str,
    bias: bool = False,
    quantized: bool = True,
) -> Iterator[Tensor]:
    """A linear layer's weight (FP8 with block scales in an FP8 checkpoint) and bias."""
    if quantized and _quantized(config):
        yield Tensor(f"{name}.weight", (out, inp), "fp8", split, where)
        yield Tensor(f"{name}.weight_scale_inv", (-(-out // BLOCK), -(-inp // BLOCK)), "fp32", split, where)
    else:
        yield Tensor(f"{name}.weight", (out, inp), _stored(config), split, where)
    if bias:
        yield Tensor(f"{name}.bias", (out,), _stored(config), "whole" if split == "cols" else split, where)


def _norm(
    config: Mapping[str, Any], name: str, size: int, where: int | str, bias: bool = False
) -> Iterator[Tensor]:
    yield Tensor(f"{name}.weight", (size,), _stored(config), "whole", where)
    if bias:
        yield Tensor(f"{name}.bias", (size,), _stored(config), "whole", where)


def _attention(config: Mapping[str, Any], prefix: str, layer: int) -> Iterator[Tensor]:
    text = _llm(config)
    hidden, heads = text["hidden_size"], text["num_attention_heads"]
    head_dim = text.get("head_dim") or hidden // heads
    kv = text.get("num_key_value_heads") or heads
    bias = text.get("model_type") in ("qwen2", "qwen2_5_vl") or bool(text.get("attention_bias"))
    yield from _linear(config, f"{prefix}.q_proj", heads * head_dim, hidden, "rows", layer, bias)
    yield from _linear(config, f"{prefix}.k_proj", kv * head_dim, hidden, "kv", layer, bias)
    yield from _linear(config, f"{prefix}.v_proj", kv * head_dim, hidden, "kv", layer, bias)
    yield from _linear(config, f"{prefix}.o_proj", hidden, heads * head_dim, "cols", layer)
    if text.get("model_type") in ("qwen3", "qwen3_moe"):
        yield from _norm(config, f"{prefix}.q_norm", head_dim, layer)
        yield from _norm(config, f"{prefix}.k_norm", head_dim, layer)


def _mla(config: Mapping[str, Any], prefix: str, layer: int) -> Iterator[Tensor]:
    text = _llm(config)
    hidden, heads = text["hidden_size"], text["num_attention_heads"]
    rope, nope, v = text["qk_rope_head_dim"], text["qk_nope_head_dim"], text["v_head_dim"]
    q_lora, kv_lora = text.get("q_lora_rank"), text["kv_lora_rank"]
    if q_lora:
        yield from _linear(config, f"{prefix}.q_a_proj", q_lora, hidden, "whole", layer)
        yield from _norm(config, f"{prefix}.q_a_layernorm", q_lora, layer)
        yield from _linear(config, f"{prefix}.q_b_proj", heads * (nope + rope), q_lora, "rows", layer)
    else:
        yield from _linear(config, f"{prefix}.q_proj", heads * (nope + rope), hidden, "rows", layer)
    yield from _linear(config, f"{prefix}.kv_a_proj_with_mqa", kv_lora + rope, hidden, "whole", layer)
    yield from _norm(config, f"{prefix}.kv_a_layernorm", kv_lora, layer)
    yield from _linear(config, f"{prefix}.kv_b_proj", heads * (nope + v), kv_lora, "rows", layer)
    yield from _linear(config, f"{prefix}.o_proj", hidden, heads * v, "cols", layer)


def _mlp(
    config: Mapping[str, Any], prefix: str, size: int, layer: int, names: tuple[str, str, str]
) -> Iterator[Tensor]:
    hidden = _llm(config)["hidden_size"]
    gate, up, down = names
    yield from _linear(config, f"{prefix}.{gate}", size, hidden, "rows", layer)
    yield from _linear(config, f"{prefix}.{up}", size, hidden, "rows", layer)
    yield from _linear(config, f"{prefix}.{down}", hidden, size, "cols", layer)


def _moe_layer(config: Mapping[str, Any], prefix: str, layer: int) -> bool:
    text = _llm(config)
    experts = text.get("n_routed_experts") or text.get("num_experts") or text.get("num_local_experts")
    if not experts:
        return False
    return layer >= (text.get("first_k_dense_replace") or 0)


def _ffn(config: Mapping[str, Any], prefix: str, layer: int) -> Iterator[Tensor]:
    text = _llm(config)
    hidden = text["hidden_size"]
    if not _moe_layer(config, prefix, layer):
        yield from _mlp(
            config, f"{prefix}.mlp", text["intermediate_size"], layer, ("gate_proj", "up_proj", "down_proj")
        )
        return
    if text.get("model_type") == "mixtral":
        experts = text["num_local_experts"]
        yield Tensor(
            f"{prefix}.block_sparse_moe.gate.weight", (experts, hidden), _stored(config), "whole", layer
        )
        for e in range(experts):
            yield from _mlp(
                config,
                f"{prefix}.block_sparse_moe.experts.{e}",
                text["intermediate_size"],
                layer,
                ("w1", "w3", "w2"),
            )
        return
    experts = text.get("n_routed_experts") or text["num_experts"]
    size = text["moe_intermediate_size"]
    yield Tensor(f"{prefix}.mlp.gate.weight", (experts, hidden), _stored(config), "whole", layer)
    if text.get("topk_method") == "noaux_tc":
        yield Tensor(f"{prefix}.mlp.gate.e_score_correction_bias", (experts,), "fp32", "whole", layer)
    for e in range(experts):
        yield from _mlp(
            config, f"{prefix}.mlp.experts.{e}", size, layer, ("gate_proj", "up_proj", "down_proj")
        )
    shared = text.get("n_shared_experts") or 0
    if shared:
        yield from _mlp(
            config,
            f"{prefix}.mlp.shared_experts",
            size * shared,
            layer,
            ("gate_proj", "up_proj", "down_proj"),
        )


def _decoder_layer(config: Mapping[str, Any], layer: int) -> Iterator[Tensor]:
    text = _llm(config)
    prefix = f"model.layers.{layer}"
    hidden = text["hidden_size"]
    mla = bool(text.get("kv_lora_rank"))
    yield from (_mla if mla else _attention)(config, f"{prefix}.self_attn", layer)
    yield from _ffn(config, prefix, layer)
    yield from _norm(config, f"{prefix}.input_layernorm", hidden, layer)
    yield from _norm(config, f"{prefix}.post_attention_layernorm", hidden, layer)
    if text.get("model_type") == "gemma2":
        yield from _norm(config, f"{prefix}.pre_feedforward_layernorm", hidden, layer)
        yield from _norm(config, f"{prefix}.post_feedforward_layernorm", hidden, layer)


def _mtp_block(config: Mapping[str, Any], layer: int) -> Iterator[Tensor]:
    """DeepSeek-V3's multi-token-prediction block: a decoder layer plus its own projections, and
    copies of the embedding and the head (``README_WEIGHTS.md`` of DeepSeek-V3)."""
    text = _llm(config)
    hidden, vocab = text["hidden_size"], text["vocab_size"]
    prefix = f"model.layers.{layer}"
    yield from _decoder_layer(config, layer)
    yield from _norm(config, f"{prefix}.enorm", hidden, layer)
    yield from _norm(config, f"{prefix}.hnorm", hidden, layer)
    # ``eh_proj`` is a ``ReplicatedLinear`` (``models/deepseek_nextn.py``): whole on every rank.
    yield from _linear(config, f"{prefix}.eh_proj", hidden, 2 * hidden, "whole", layer, quantized=False)
    yield from _norm(config, f"{prefix}.shared_head.norm", hidden, layer)
    yield Tensor(f"{prefix}.embed_tokens.weight", (vocab, hidden), _stored(config), "vocab", layer)
    yield Tensor(f"{prefix}.shared_head.head.weight", (vocab, hidden), _stored(config), "vocab", layer)


def _roberta(config: Mapping[str, Any]) -> Iterator[Tensor]:
    """XLM-RoBERTa (bge-m3): embeddings, encoder layers with biases and LayerNorms."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    dtype = _stored(config)
    yield Tensor("embeddings.word_embeddings.weight", (config["vocab_size"], hidden), dtype, "vocab", "embed")
    yield Tensor(
        "embeddings.position_embeddings.weight",
        (config["max_position_embeddings"], hidden),
        dtype,
        "whole",
        "embed",
    )
    yield Tensor(
        "embeddings.token_type_embeddings.weight",
        (config.get("type_vocab_size", 1), hidden),
        dtype,
        "whole",
        "embed",
    )
    yield from _norm(config, "embeddings.LayerNorm", hidden, "embed", bias=True)
    for layer in range(config["num_hidden_layers"]):
        prefix = f"encoder.layer.{layer}"
        for part in ("query", "key", "value"):
            yield from _linear(
                config, f"{prefix}.attention.self.{part}", hidden, hidden, "rows", layer, bias=True
            )
        yield from _linear(
            config, f"{prefix}.attention.output.dense", hidden, hidden, "cols", layer, bias=True
        )
        yield from _norm(config, f"{prefix}.attention.output.LayerNorm", hidden, layer, bias=True)
        yield from _linear(config, f"{prefix}.intermediate.dense", inter, hidden, "rows", layer, bias=True)
        yield from _linear(config, f"{prefix}.output.dense", hidden, inter, "cols", layer, bias=True)
        yield from _norm(config, f"{prefix}.output.LayerNorm", hidden, layer, bias=True)


def tensors(config: Mapping[str, Any]) -> list[Tensor]:
    """Every tensor of the checkpoint, as stored."""
    return list(_tensors(json.dumps(config, sort_keys=True)))


@functools.lru_cache(maxsize=64)
def _tensors(key: str) -> tuple[Tensor, ...]:
    return tuple(_listing(json.loads(key)))


def _listing(config: Mapping[str, Any]) -> list[Tensor]:
    if config.get("model_type") == "xlm-roberta":
        return list(_roberta(config))
    text = _llm(config)
    hidden, vocab = text["hidden_size"], text["vocab_size"]
    dtype = _stored(config)
    found = [Tensor("model.embed_tokens.weight", (vocab, hidden), dtype, "vocab", "embed")]
    layers = text["num_hidden_layers"]
    for layer in range(layers):
        found.extend(_decoder_layer(config, layer))
    for layer in range(layers, layers + (text.get("num_nextn_predict_layers") or 0)):
        found.extend(_mtp_block(config, layer))
    found.extend(_norm(config, "model.norm", hidden, "final"))
    if not (text.get("tie_word_embeddings") or config.get("tie_word_embeddings")):
        found.append(Tensor("lm_head.weight", (vocab, hidden), dtype, "vocab", "head"))
    return found


def total_bytes(config: Mapping[str, Any]) -> int:
    """The checkpoint's size on disk (the safetensors ``total_size``)."""
    return sum(math.prod(t.shape) * ELEMENT[t.dtype] for t in tensors(config))


def _rank_elements(tensor: Tensor, tp: int, kv_heads: int) -> int:
    rows, *rest = tensor.shape
    cols = math.prod(rest)
    if tensor.split == "whole" or tp == 1:
        return rows * cols if tensor.split != "vocab" else -(-rows // VOCAB_PAD) * VOCAB_PAD * cols
    if tensor.split == "vocab":
        return -(-rows // VOCAB_PAD) * VOCAB_PAD // tp * cols
    if tensor.split == "kv":
        per_head = rows // kv_heads
        return max(1, kv_heads // tp) * per_head * cols
    if tensor.split == "rows":
        return -(-rows // tp) * cols
    return rows * -(-cols // tp)  # cols: row-parallel splits the input dimension


def _held(
    tensor: Tensor, stage: tuple[int, int], first: bool, last: bool, tied: bool, mtp: bool, layers: int
) -> int:
    """How many copies of ``tensor`` the stage constructs (0, 1, or 2 for a tied head)."""
    where = tensor.where
    if where == "embed":
        return int(first) + int(last and tied and not first)
    if where in ("head", "final"):
        return int(last)
    assert isinstance(where, int)
    if where >= layers:  # an MTP block: drafted from only with speculative decoding
        copies = ".embed_tokens." in tensor.name or ".shared_head.head." in tensor.name
        return int(mtp and last and not copies)
    return int(stage[0] <= where < stage[1])


def loaded(
    config: Mapping[str, Any],
    *,
    tp: int = 1,
    pp: int = 1,
    dtype: str = "auto",
    speculative: bool = False,
) -> list[int]:
    """Bytes SGLang holds on a rank of each PP stage (TP rank 0), stage by stage."""
    return list(_loaded(json.dumps(config, sort_keys=True), tp, pp, dtype, speculative))


@functools.lru_cache(maxsize=4096)
def _loaded(key: str, tp: int, pp: int, dtype: str, speculative: bool) -> tuple[int, ...]:
    config = json.loads(key)
    text = _llm(config)
    layers = text["num_hidden_layers"]
    running = extra.model_config(config, dtype=dtype).dtype
    kv_heads = text.get("num_key_value_heads") or text.get("num_attention_heads") or 1
    tied = bool(text.get("tie_word_embeddings") or config.get("tie_word_embeddings"))
    stages = extra.pp_layers(layers, pp)
    listing = _tensors(key)
    result = []
    for index, stage in enumerate(stages):
        first, last = index == 0, index == len(stages) - 1
        held = 0
        for tensor in listing:
            copies = _held(tensor, stage, first, last, tied, speculative, layers)
            if copies:
                element = (
                    ELEMENT[tensor.dtype]
                    if tensor.dtype in ("fp8",) or tensor.name.endswith("_inv")
                    else ELEMENT[running]
                )
                if tensor.name.endswith("e_score_correction_bias"):
                    element = ELEMENT["fp32"]
                held += copies * _rank_elements(tensor, tp, kv_heads) * element
        result.append(held)
    return tuple(result)
