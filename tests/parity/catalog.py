"""Hardware and model facts the parity generator draws from.

GPU memory totals are what the drivers report (``nvidia-smi`` / ``amd-smi`` /
``npu-smi`` MiB × 2**20), not the marketing size, so fractions and claims land on
the awkward numbers real clusters produce. Model configs are the published
``config.json`` files, trimmed to the keys a scheduler can read, with
``model_type`` always present (GPUStack parses them with ``transformers``'
``AutoConfig``); ``weight_bytes`` is the size of the repository's safetensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GIB = 1 << 30
MIB = 1 << 20


@dataclass(frozen=True)
class GpuKind:
    """One accelerator model as a worker reports it."""

    slug: str
    name: str
    vendor: str
    type: str
    total: int
    arch: str | None
    cores: int
    #: RAM sizes (GiB) of hosts that carry this card.
    host_ram_gib: tuple[int, ...]
    #: GPU counts per host, as such hosts are built.
    per_host: tuple[int, ...]
    unified: bool = False


GPU_KINDS: dict[str, GpuKind] = {
    kind.slug: kind
    for kind in (
        GpuKind(
            "rtx4080", "NVIDIA GeForce RTX 4080", "nvidia", "cuda", 16376 * MIB, "8.9", 9728, (32, 64), (1, 2)
        ),
        GpuKind(
            "rtx4090",
            "NVIDIA GeForce RTX 4090",
            "nvidia",
            "cuda",
            24564 * MIB,
            "8.9",
            16384,
            (64, 128, 256),
            (1, 2, 4, 8),
        ),
        GpuKind("a10", "NVIDIA A10", "nvidia", "cuda", 23028 * MIB, "8.6", 9216, (128, 256), (1, 2, 4)),
        GpuKind("l40s", "NVIDIA L40S", "nvidia", "cuda", 46068 * MIB, "8.9", 18176, (256, 512), (2, 4, 8)),
        GpuKind(
            "a100-40",
            "NVIDIA A100-SXM4-40GB",
            "nvidia",
            "cuda",
            40960 * MIB,
            "8.0",
            6912,
            (512, 1024),
            (4, 8),
        ),
        GpuKind(
            "a100-80",
            "NVIDIA A100-SXM4-80GB",
            "nvidia",
            "cuda",
            81920 * MIB,
            "8.0",
            6912,
            (1024, 2048),
            (2, 4, 8),
        ),
        GpuKind(
            "h100",
            "NVIDIA H100 80GB HBM3",
            "nvidia",
            "cuda",
            81559 * MIB,
            "9.0",
            16896,
            (1024, 2048),
            (8, 8, 4, 2),
        ),
        GpuKind("h200", "NVIDIA H200", "nvidia", "cuda", 143771 * MIB, "9.0", 16896, (2048,), (8, 8, 4)),
        GpuKind(
            "mi300x", "AMD Instinct MI300X", "amd", "rocm", 196592 * MIB, "gfx942", 19456, (2048,), (8, 8, 4)
        ),
        GpuKind("910b3", "Ascend910B3", "ascend", "cann", 65536 * MIB, None, 20, (1024, 1536), (8, 8, 4)),
        GpuKind("910b4", "Ascend910B4", "ascend", "cann", 32768 * MIB, None, 20, (512, 1024), (8, 4)),
        GpuKind(
            "gb10", "NVIDIA GB10", "nvidia", "cuda", 122570 * MIB, "12.1", 6144, (128,), (1,), unified=True
        ),
    )
}

#: Clusters are mostly one kind of machine; these are the kinds drawn, by weight.
KIND_WEIGHTS: dict[str, int] = {
    "rtx4090": 16,
    "rtx4080": 4,
    "a10": 5,
    "l40s": 10,
    "a100-40": 6,
    "a100-80": 12,
    "h100": 18,
    "h200": 7,
    "mi300x": 6,
    "910b3": 5,
    "910b4": 3,
    "gb10": 2,
}


@dataclass(frozen=True)
class ModelEntry:
    """A model as a user deploys it: repository, category, config.json and weight size."""

    key: str
    repo: str
    categories: tuple[str, ...]
    weight_bytes: int
    config: dict[str, Any] | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)


def _decoder(
    model_type: str,
    arch: str,
    hidden: int,
    inter: int,
    heads: int,
    kv: int,
    layers: int,
    vocab: int,
    max_pos: int,
    **extra: Any,
) -> dict[str, Any]:
    """A decoder-only ``config.json`` in the shape the Hub serves it."""
    config: dict[str, Any] = {
        "architectures": [arch],
        "model_type": model_type,
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "num_hidden_layers": layers,
        "vocab_size": vocab,
        "max_position_embeddings": max_pos,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-06,
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
    }
    config.update(extra)
    return config


def _llama(hidden: int, inter: int, heads: int, layers: int, **extra: Any) -> dict[str, Any]:
    extra.setdefault("rope_theta", 500000.0)
    extra.setdefault(
        "rope_scaling",
        {
            "factor": 8.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
    )
    return _decoder(
        "llama",
        "LlamaForCausalLM",
        hidden,
        inter,
        heads,
        8,
        layers,
        128256,
        131072,
        bos_token_id=128000,
        eos_token_id=128009,
        rms_norm_eps=1e-05,
        **extra,
    )


def _qwen2(
    hidden: int, inter: int, heads: int, kv: int, layers: int, vocab: int = 152064, **extra: Any
) -> dict[str, Any]:
    return _decoder(
        "qwen2",
        "Qwen2ForCausalLM",
        hidden,
        inter,
        heads,
        kv,
        layers,
        vocab,
        32768,
        rope_theta=1000000.0,
        sliding_window=131072,
        use_sliding_window=False,
        max_window_layers=layers,
        **extra,
    )


def _qwen3(
    hidden: int,
    inter: int,
    heads: int,
    kv: int,
    layers: int,
    vocab: int = 151936,
    arch: str = "Qwen3ForCausalLM",
    **extra: Any,
) -> dict[str, Any]:
    return _decoder(
        "qwen3",
        arch,
        hidden,
        inter,
        heads,
        kv,
        layers,
        vocab,
        40960,
        head_dim=128,
        rope_theta=1000000.0,
        **extra,
    )


def _qwen3_moe(hidden: int, inter: int, moe_inter: int, heads: int, kv: int, layers: int) -> dict[str, Any]:
    return _decoder(
        "qwen3_moe",
        "Qwen3MoeForCausalLM",
        hidden,
        inter,
        heads,
        kv,
        layers,
        151936,
        40960,
        head_dim=128,
        num_experts=128,
        num_experts_per_tok=8,
        moe_intermediate_size=moe_inter,
        norm_topk_prob=True,
        rope_theta=1000000.0,
    )


_QWEN2_VL_VISION = {
    "depth": 32,
    "embed_dim": 1280,
    "mlp_ratio": 4,
    "num_heads": 16,
    "in_chans": 3,
    "hidden_size": 1536,
    "patch_size": 14,
    "spatial_merge_size": 2,
    "spatial_patch_size": 14,
    "temporal_patch_size": 2,
}


def _qwen2_vl(hidden: int, inter: int, heads: int, kv: int, vocab: int) -> dict[str, Any]:
    vision = dict(_QWEN2_VL_VISION, hidden_size=hidden)
    return _decoder(
        "qwen2_vl",
        "Qwen2VLForConditionalGeneration",
        hidden,
        inter,
        heads,
        kv,
        28,
        vocab,
        32768,
        rope_theta=1000000.0,
        vision_start_token_id=151652,
        vision_end_token_id=151653,
        image_token_id=151655,
        video_token_id=151656,
        vision_config=vision,
        rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]},
    )


def _qwen2_5_vl(hidden: int, inter: int, heads: int, kv: int, layers: int, vocab: int) -> dict[str, Any]:
    vision = {
        "depth": 32,
        "hidden_act": "silu",
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "in_chans": 3,
        "out_hidden_size": hidden,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "spatial_patch_size": 14,
        "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "tokens_per_second": 2,
        "temporal_patch_size": 2,
    }
    return _decoder(
        "qwen2_5_vl",
        "Qwen2_5_VLForConditionalGeneration",
        hidden,
        inter,
        heads,
        kv,
        layers,
        vocab,
        128000,
        rope_theta=1000000.0,
        vision_start_token_id=151652,
        vision_end_token_id=151653,
        image_token_id=151655,
        video_token_id=151656,
        vision_config=vision,
        rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]},
    )


def _llava(
    text_type: str,
    hidden: int,
    inter: int,
    heads: int,
    kv: int,
    vocab: int,
    model_type: str = "llava",
    arch: str = "LlavaForConditionalGeneration",
) -> dict[str, Any]:
    return {
        "architectures": [arch],
        "model_type": model_type,
        "ignore_index": -100,
        "image_token_index": 32000,
        "projector_hidden_act": "gelu",
        "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default",
        "vocab_size": vocab,
        "torch_dtype": "float16",
        "text_config": {
            "model_type": text_type,
            "architectures": [f"{text_type.capitalize()}ForCausalLM"],
            "hidden_size": hidden,
            "intermediate_size": inter,
            "num_attention_heads": heads,
            "num_key_value_heads": kv,
            "num_hidden_layers": 32,
            "vocab_size": vocab,
            "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-05,
            "torch_dtype": "float16",
        },
        "vision_config": {
            "model_type": "clip_vision_model",
            "hidden_size": 1024,
            "image_size": 336,
            "intermediate_size": 4096,
            "num_attention_heads": 16,
            "num_hidden_layers": 24,
            "patch_size": 14,
            "projection_dim": 768,
        },
    }


def _xlm_roberta(arch: str) -> dict[str, Any]:
    return {
        "architectures": [arch],
        "model_type": "xlm-roberta",
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_attention_heads": 16,
        "num_hidden_layers": 24,
        "vocab_size": 250002,
        "max_position_embeddings": 8194,
        "type_vocab_size": 1,
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-05,
        "torch_dtype": "float32",
        "pad_token_id": 1,
    }


_DEEPSEEK_V3 = _decoder(
    "deepseek_v3",
    "DeepseekV3ForCausalLM",
    7168,
    18432,
    128,
    128,
    61,
    129280,
    163840,
    kv_lora_rank=512,
    q_lora_rank=1536,
    qk_rope_head_dim=64,
    qk_nope_head_dim=128,
    v_head_dim=128,
    n_routed_experts=256,
    n_shared_experts=1,
    num_experts_per_tok=8,
    moe_intermediate_size=2048,
    first_k_dense_replace=3,
    n_group=8,
    topk_group=4,
    routed_scaling_factor=2.5,
    rope_theta=10000,
    quantization_config={
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
)

LLMS: tuple[ModelEntry, ...] = (
    ModelEntry(
        "llama3.2-1b",
        "meta-llama/Llama-3.2-1B-Instruct",
        ("llm",),
        2471645608,
        _llama(2048, 8192, 32, 16, head_dim=64, tie_word_embeddings=True),
    ),
    ModelEntry(
        "llama3.2-3b",
        "meta-llama/Llama-3.2-3B-Instruct",
        ("llm",),
        6425499648,
        _llama(3072, 8192, 24, 28, head_dim=128, tie_word_embeddings=True),
    ),
    ModelEntry(
        "llama3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", ("llm",), 16060522496, _llama(4096, 14336, 32, 32)
    ),
    ModelEntry(
        "llama3.3-70b",
        "meta-llama/Llama-3.3-70B-Instruct",
        ("llm",),
        141107412992,
        _llama(8192, 28672, 64, 80),
    ),
    ModelEntry(
        "llama3.1-405b-fp8",
        "meta-llama/Llama-3.1-405B-Instruct-FP8",
        ("llm",),
        410082738176,
        _llama(
            16384,
            53248,
            128,
            126,
            quantization_config={"activation_scheme": "dynamic", "quant_method": "fbgemm_fp8"},
        ),
    ),
    ModelEntry(
        "qwen2.5-0.5b",
        "Qwen/Qwen2.5-0.5B-Instruct",
        ("llm",),
        988097536,
        _qwen2(896, 4864, 14, 2, 24, vocab=151936, tie_word_embeddings=True),
    ),
    ModelEntry(
        "qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct", ("llm",), 15231233024, _qwen2(3584, 18944, 28, 4, 28)
    ),
    ModelEntry(
        "qwen2.5-14b", "Qwen/Qwen2.5-14B-Instruct", ("llm",), 29540067328, _qwen2(5120, 13824, 40, 8, 48)
    ),
    ModelEntry(
        "qwen2.5-32b", "Qwen/Qwen2.5-32B-Instruct", ("llm",), 65527752704, _qwen2(5120, 27648, 40, 8, 64)
    ),
    ModelEntry(
        "qwen2.5-72b", "Qwen/Qwen2.5-72B-Instruct", ("llm",), 145412407296, _qwen2(8192, 29568, 64, 8, 80)
    ),
    ModelEntry("qwen3-8b", "Qwen/Qwen3-8B", ("llm",), 16381470720, _qwen3(4096, 12288, 32, 8, 36)),
    ModelEntry("qwen3-32b", "Qwen/Qwen3-32B", ("llm",), 65524246528, _qwen3(5120, 25600, 64, 8, 64)),
    ModelEntry(
        "qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", ("llm",), 61064245248, _qwen3_moe(2048, 6144, 768, 32, 4, 48)
    ),
    ModelEntry(
        "qwen3-235b-a22b",
        "Qwen/Qwen3-235B-A22B",
        ("llm",),
        470187422720,
        _qwen3_moe(4096, 12288, 1536, 64, 4, 94),
    ),
    ModelEntry(
        "mistral-7b",
        "mistralai/Mistral-7B-Instruct-v0.3",
        ("llm",),
        14496047104,
        _decoder(
            "mistral",
            "MistralForCausalLM",
            4096,
            14336,
            32,
            8,
            32,
            32768,
            32768,
            rope_theta=1000000.0,
            sliding_window=None,
        ),
    ),
    ModelEntry(
        "mistral-small-24b",
        "mistralai/Mistral-Small-24B-Instruct-2501",
        ("llm",),
        47144806400,
        _decoder(
            "mistral",
            "MistralForCausalLM",
            5120,
            32768,
            32,
            8,
            40,
            131072,
            32768,
            head_dim=128,
            rope_theta=100000000.0,
            sliding_window=None,
        ),
    ),
    ModelEntry(
        "mixtral-8x7b",
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
        ("llm",),
        93405585408,
        _decoder(
            "mixtral",
            "MixtralForCausalLM",
            4096,
            14336,
            32,
            8,
            32,
            32000,
            32768,
            num_local_experts=8,
            num_experts_per_tok=2,
            rope_theta=1000000.0,
        ),
    ),
    ModelEntry("deepseek-r1", "deepseek-ai/DeepSeek-R1", ("llm",), 688586727424, _DEEPSEEK_V3),
    ModelEntry(
        "gemma2-9b",
        "google/gemma-2-9b-it",
        ("llm",),
        18483520512,
        _decoder(
            "gemma2",
            "Gemma2ForCausalLM",
            3584,
            14336,
            16,
            8,
            42,
            256000,
            8192,
            head_dim=256,
            query_pre_attn_scalar=256,
            sliding_window=4096,
            final_logit_softcapping=30.0,
            attn_logit_softcapping=50.0,
            hidden_activation="gelu_pytorch_tanh",
        ),
    ),
    ModelEntry(
        "gemma2-27b",
        "google/gemma-2-27b-it",
        ("llm",),
        54454806528,
        _decoder(
            "gemma2",
            "Gemma2ForCausalLM",
            4608,
            36864,
            32,
            16,
            46,
            256000,
            8192,
            head_dim=128,
            query_pre_attn_scalar=144,
            sliding_window=4096,
            final_logit_softcapping=30.0,
            attn_logit_softcapping=50.0,
            hidden_activation="gelu_pytorch_tanh",
        ),
    ),
    ModelEntry(
        "phi3-mini",
        "microsoft/Phi-3-mini-4k-instruct",
        ("llm",),
        7642159104,
        _decoder(
            "phi3",
            "Phi3ForCausalLM",
            3072,
            8192,
            32,
            32,
            32,
            32064,
            4096,
            rope_theta=10000.0,
            sliding_window=2047,
        ),
    ),
)

VLMS: tuple[ModelEntry, ...] = (
    ModelEntry(
        "qwen2-vl-2b", "Qwen/Qwen2-VL-2B-Instruct", ("llm",), 4418050048, _qwen2_vl(1536, 8960, 12, 2, 151936)
    ),
    ModelEntry(
        "qwen2-vl-7b",
        "Qwen/Qwen2-VL-7B-Instruct",
        ("llm",),
        16582751232,
        _qwen2_vl(3584, 18944, 28, 4, 152064),
    ),
    ModelEntry(
        "qwen2.5-vl-3b",
        "Qwen/Qwen2.5-VL-3B-Instruct",
        ("llm",),
        7509245952,
        _qwen2_5_vl(2048, 11008, 16, 2, 36, 151936),
    ),
    ModelEntry(
        "qwen2.5-vl-7b",
        "Qwen/Qwen2.5-VL-7B-Instruct",
        ("llm",),
        16584333312,
        _qwen2_5_vl(3584, 18944, 28, 4, 28, 152064),
    ),
    ModelEntry(
        "qwen2.5-vl-72b",
        "Qwen/Qwen2.5-VL-72B-Instruct",
        ("llm",),
        146798862336,
        _qwen2_5_vl(8192, 29568, 64, 8, 80, 152064),
    ),
    ModelEntry(
        "llava-1.5-7b",
        "llava-hf/llava-1.5-7b-hf",
        ("llm",),
        14127369216,
        _llava("llama", 4096, 11008, 32, 32, 32064),
    ),
    ModelEntry(
        "llava-next-mistral-7b",
        "llava-hf/llava-v1.6-mistral-7b-hf",
        ("llm",),
        15133479936,
        _llava(
            "mistral",
            4096,
            14336,
            32,
            8,
            32064,
            model_type="llava_next",
            arch="LlavaNextForConditionalGeneration",
        ),
    ),
)

EMBEDDINGS: tuple[ModelEntry, ...] = (
    ModelEntry("bge-m3", "BAAI/bge-m3", ("embedding",), 2271064456, _xlm_roberta("XLMRobertaModel")),
    ModelEntry(
        "qwen3-embedding-0.6b",
        "Qwen/Qwen3-Embedding-0.6B",
        ("embedding",),
        1191586416,
        _qwen3(1024, 3072, 16, 8, 28, vocab=151669, tie_word_embeddings=True),
    ),
    ModelEntry(
        "qwen3-embedding-8b",
        "Qwen/Qwen3-Embedding-8B",
        ("embedding",),
        15134080000,
        _qwen3(4096, 12288, 32, 8, 36, vocab=151665),
    ),
    ModelEntry(
        "e5-mistral-7b",
        "intfloat/e5-mistral-7b-instruct",
        ("embedding",),
        14221320192,
        _decoder(
            "mistral",
            "MistralModel",
            4096,
            14336,
            32,
            8,
            32,
            32000,
            32768,
            rope_theta=10000.0,
            sliding_window=4096,
        ),
    ),
    ModelEntry(
        "bge-reranker-v2-m3",
        "BAAI/bge-reranker-v2-m3",
        ("reranker",),
        2271071852,
        _xlm_roberta("XLMRobertaForSequenceClassification"),
    ),
    ModelEntry(
        "qwen3-reranker-4b",
        "Qwen/Qwen3-Reranker-4B",
        ("reranker",),
        8044936192,
        _qwen3(2560, 9728, 32, 8, 36, vocab=151669, tie_word_embeddings=True),
    ),
)

DIFFUSION: tuple[ModelEntry, ...] = (
    ModelEntry("qwen-image", "Qwen/Qwen-Image", ("image",), 57704611840),
    ModelEntry("flux1-dev", "black-forest-labs/FLUX.1-dev", ("image",), 33740414976),
    ModelEntry("flux1-schnell", "black-forest-labs/FLUX.1-schnell", ("image",), 33740413952),
    ModelEntry("z-image-turbo", "Tongyi-MAI/Z-Image-Turbo", ("image",), 20535828480),
    ModelEntry("sd3.5-large", "stabilityai/stable-diffusion-3.5-large", ("image",), 27354378240),
    ModelEntry("sdxl-base", "stabilityai/stable-diffusion-xl-base-1.0", ("image",), 6938040682),
    ModelEntry("wan2.2-ti2v-5b", "Wan-AI/Wan2.2-TI2V-5B-Diffusers", ("image",), 22470379520),
)

TTS: tuple[ModelEntry, ...] = (
    ModelEntry("qwen3-tts-1.7b", "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice", ("text_to_speech",), 3833174016),
    ModelEntry("kokoro-82m", "hexgrad/Kokoro-82M", ("text_to_speech",), 327212226),
    ModelEntry("cosyvoice2-0.5b", "FunAudioLLM/CosyVoice2-0.5B", ("text_to_speech",), 2061249920),
)

#: LoRA adapters users attach (repository, safetensors size).
LORAS: tuple[tuple[str, int], ...] = (
    ("algoprog/llama3-sql-lora", 167832240),
    ("Qwen/qwen2.5-7b-math-lora", 80792096),
    ("predibase/customer_support", 54560368),
    ("kaist-ai/prometheus-lora", 335611728),
)
