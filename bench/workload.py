"""A seeded workload trace for the policy simulation: a heterogeneous cluster and deployments
arriving and leaving.

The cluster (:func:`cluster`) mixes H100, H200, A100-80G, L40S, RTX 4090 and
MI300X nodes; about one GPU in eight is partly used by processes outside the
ledger (2–16 GiB, reported as ``memory.used``). The deployments
(:func:`trace`) draw from :data:`CATALOG`: popular open models from 0.5B to
671B parameters, dense and MoE, LLM, VLM, embedding and diffusion, with tp /
pp / dp mixes and some with ``--mem-fraction-static``. Small models are drawn
more often, as in real fleets. Everything is a pure function of the seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

GIB = 1 << 30
MIB = 1 << 20

#: Seeds of the default trace (three runs).
DEFAULT_SEEDS = (1, 2, 3)
#: Arrivals in the default trace, and the mean lifetime of a deployment in arrivals.
DEFAULT_ARRIVALS = 260
MEAN_LIFETIME = 150

#: (name, GPUs per node, total bytes per GPU, GPU type, vendor, nodes).
NODE_KINDS: tuple[tuple[str, int, int, str, str, int], ...] = (
    ("NVIDIA H100 80GB HBM3", 8, 81559 * MIB, "cuda", "nvidia", 5),
    ("NVIDIA H200", 8, 143771 * MIB, "cuda", "nvidia", 2),
    ("NVIDIA A100-SXM4-80GB", 8, 81920 * MIB, "cuda", "nvidia", 4),
    ("NVIDIA L40S", 4, 46068 * MIB, "cuda", "nvidia", 4),
    ("NVIDIA GeForce RTX 4090", 2, 24564 * MIB, "cuda", "nvidia", 6),
    ("AMD Instinct MI300X", 8, 196592 * MIB, "rocm", "amd", 2),
)
#: Share of GPUs partly used by other processes, and how much they hold.
OUTSIDE_SHARE = 0.12
OUTSIDE_RANGE = (2 * GIB, 16 * GIB)


def _llm(arch: str, layers: int, hidden: int, heads: int, kv: int, ctx: int, **extra: Any) -> dict[str, Any]:
    return {
        "architectures": [arch],
        "model_type": arch.lower().split("for")[0],
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "max_position_embeddings": ctx,
        "vocab_size": 151936,
        "torch_dtype": "bfloat16",
        **extra,
    }


#: Qwen2.5-VL's vision config as published: its depth is ``depth`` (SGLang reads ``num_hidden_layers``).
_VISION = {"depth": 32, "hidden_size": 1280, "num_heads": 16, "out_hidden_size": 3584}

#: name → (config or None, weight bytes, categories, backend-parameter choices, draw weight).
CATALOG: dict[str, tuple[dict[str, Any] | None, int, list[str], list[list[str]], float]] = {
    "Qwen2.5-0.5B-Instruct": (
        _llm("Qwen2ForCausalLM", 24, 896, 14, 2, 32768, intermediate_size=4864, tie_word_embeddings=True),
        988_097_536,
        [],
        [[], [], ["--dp-size", "2"]],
        5,
    ),
    "Qwen2.5-1.5B-Instruct": (
        _llm("Qwen2ForCausalLM", 28, 1536, 12, 2, 32768, intermediate_size=8960, tie_word_embeddings=True),
        3_087_467_520,
        [],
        [[], ["--mem-fraction-static", "0.5"]],
        4,
    ),
    "Llama-3.2-3B-Instruct": (
        _llm(
            "LlamaForCausalLM",
            28,
            3072,
            24,
            8,
            131072,
            intermediate_size=8192,
            head_dim=128,
            vocab_size=128256,
            tie_word_embeddings=True,
        ),
        6_425_499_648,
        [],
        [[]],
        4,
    ),
    "Qwen2.5-7B-Instruct": (
        _llm("Qwen2ForCausalLM", 28, 3584, 28, 4, 32768, intermediate_size=18944, vocab_size=152064),
        15_231_233_024,
        [],
        [[], [], ["--dp-size", "2"]],
        5,
    ),
    "Llama-3.1-8B-Instruct": (
        _llm("LlamaForCausalLM", 32, 4096, 32, 8, 131072, intermediate_size=14336, vocab_size=128256),
        16_060_522_496,
        [],
        [[], ["--mem-fraction-static", "0.8"]],
        5,
    ),
    "Qwen2.5-VL-7B-Instruct": (
        _llm(
            "Qwen2_5_VLForConditionalGeneration",
            28,
            3584,
            28,
            4,
            128000,
            intermediate_size=18944,
            vocab_size=152064,
            vision_config=_VISION,
        ),
        16_584_333_312,
        [],
        [[]],
        2,
    ),
    "bge-m3": (
        {
            "architectures": ["XLMRobertaModel"],
            "model_type": "xlm-roberta",
            "num_hidden_layers": 24,
            "hidden_size": 1024,
            "num_attention_heads": 16,
            "intermediate_size": 4096,
            "max_position_embeddings": 8194,
            "type_vocab_size": 1,
            "vocab_size": 250002,
            "torch_dtype": "float32",
        },
        2_271_145_830,
        ["embedding"],
        [[]],
        3,
    ),
    "gte-Qwen2-7B-instruct": (
        _llm("Qwen2ForCausalLM", 28, 3584, 28, 4, 32768, intermediate_size=18944, vocab_size=152064),
        15_231_233_024,
        ["embedding"],
        [[]],
        1,
    ),
    "Qwen2.5-14B-Instruct": (
        _llm("Qwen2ForCausalLM", 48, 5120, 40, 8, 32768, intermediate_size=13824, vocab_size=152064),
        29_540_067_328,
        [],
        [[], ["--tp-size", "2"], ["--dp-size", "2"]],
        3,
    ),
    "Qwen3-30B-A3B": (
        _llm(
            "Qwen3MoeForCausalLM",
            48,
            2048,
            32,
            4,
            40960,
            head_dim=128,
            num_experts=128,
            moe_intermediate_size=768,
            intermediate_size=6144,
        ),
        61_064_245_248,
        [],
        [[], ["--tp-size", "2"]],
        2,
    ),
    "Qwen2.5-32B-Instruct": (
        _llm("Qwen2ForCausalLM", 64, 5120, 40, 8, 32768, intermediate_size=27648, vocab_size=152064),
        65_527_752_704,
        [],
        [[], ["--tp-size", "2"], ["--tp-size", "4"]],
        2,
    ),
    "Mixtral-8x7B-Instruct": (
        _llm(
            "MixtralForCausalLM",
            32,
            4096,
            32,
            8,
            32768,
            num_local_experts=8,
            intermediate_size=14336,
            vocab_size=32000,
        ),
        93_405_585_408,
        [],
        [["--tp-size", "2"], ["--tp-size", "4"]],
        1,
    ),
    "Llama-3.1-70B-Instruct": (
        _llm("LlamaForCausalLM", 80, 8192, 64, 8, 131072, intermediate_size=28672, vocab_size=128256),
        141_107_412_992,
        [],
        [
            [],
            ["--tp-size", "4"],
            ["--tp-size", "8"],
            ["--tp-size", "2", "--dp-size", "2"],
            ["--tp-size", "4", "--pp-size", "2"],
        ],
        2,
    ),
    "Qwen2.5-72B-Instruct": (
        _llm("Qwen2ForCausalLM", 80, 8192, 64, 8, 32768, intermediate_size=29568, vocab_size=152064),
        145_412_407_296,
        [],
        [["--tp-size", "8"], []],
        1,
    ),
    "DeepSeek-V3": (
        _llm(
            "DeepseekV3ForCausalLM",
            61,
            7168,
            128,
            128,
            163840,
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            qk_nope_head_dim=128,
            v_head_dim=128,
            q_lora_rank=1536,
            n_routed_experts=256,
            n_shared_experts=1,
            first_k_dense_replace=3,
            moe_intermediate_size=2048,
            intermediate_size=18432,
            topk_method="noaux_tc",
            num_nextn_predict_layers=1,
            vocab_size=129280,
            quantization_config={"quant_method": "fp8", "weight_block_size": [128, 128]},
        ),
        688_586_727_424,
        [],
        [["--tp-size", "16"], []],
        0.5,
    ),
    "FLUX.1-dev": (None, 33_858_076_672, ["image"], [[]], 1),
}


@dataclass(frozen=True, slots=True)
class Deployment:
    """One arrival: the model row to place and how long it stays (in arrivals)."""

    number: int
    model: dict[str, Any]
    lifetime: int


def cluster(seed: int) -> list[dict[str, Any]]:
    """The worker rows (READY, 512 GiB RAM), with outside usage on some GPUs."""
    rng = random.Random(seed * 7919)
    workers: list[dict[str, Any]] = []
    for name, count, total, kind, vendor, nodes in NODE_KINDS:
        for node in range(nodes):
            worker_id = len(workers) + 1
            gpus = []
            for index in range(count):
                used = rng.randint(*OUTSIDE_RANGE) if rng.random() < OUTSIDE_SHARE else 0
                gpus.append(
                    {
                        "name": name,
                        "vendor": vendor,
                        "type": kind,
                        "index": index,
                        "memory": {"total": total, "used": used, "is_unified_memory": False},
                    }
                )
            short = name.split()[-1].lower().replace("-sxm4-80gb", "").replace("80gb", "h100")
            workers.append(
                {
                    "id": worker_id,
                    "name": f"{short}-{node}",
                    "ip": f"10.0.{worker_id}.1",
                    "cluster_id": 1,
                    "state": "ready",
                    "labels": {},
                    "system_reserved": {"ram": 0, "vram": 0},
                    "status": {
                        "memory": {"total": 512 * GIB, "is_unified_memory": False},
                        "gpu_devices": gpus,
                    },
                }
            )
    return workers


def trace(seed: int, arrivals: int = DEFAULT_ARRIVALS) -> list[Deployment]:
    """``arrivals`` deployments drawn from :data:`CATALOG` with geometric lifetimes."""
    rng = random.Random(seed)
    names = list(CATALOG)
    weights = [CATALOG[name][4] for name in names]
    deployments = []
    for number in range(arrivals):
        name = rng.choices(names, weights)[0]
        config, weight, categories, choices, _ = CATALOG[name]
        row: dict[str, Any] = {
            "id": number + 1,
            "name": f"{name}-{number}",
            "backend": "SGLang",
            "cluster_id": 1,
            "backend_parameters": list(rng.choice(choices)),
            "categories": categories,
            "weight_bytes": weight,
            "placement_strategy": "spread",
        }
        if config is not None:
            row["hf_config"] = config
        lifetime = max(1, int(rng.expovariate(1 / MEAN_LIFETIME)))
        deployments.append(Deployment(number, row, lifetime))
    return deployments
