"""SGLang's own code as the oracle of ``policy: precise``, and the corpus the tests judge it on.

The oracle (``tools/sglang-oracle``: the kit's ``oracle.py`` and our ``extra.py``,
``checkpoint.py``, ``launch.py``) executes SGLang 0.5.16's functions from its PyPI wheel,
unpacked by ``bash tools/sglang-oracle/setup.sh`` (``make test`` runs it). Without the
unpacked sources :func:`require` skips the calling module locally and fails it under ``CI=1``.

:func:`corpus` is a seeded list of placements: many architectures (dense, GQA/MHA, MoE, MLA
with FP8 weights and an MTP layer, a VLM, float32 checkpoints, Gemma), GPU sizes from 24 to
180 GiB, tp/pp/dp, KV dtypes, GPUs partly used by other processes and the flags SGLang's memory
code reads, each as the GPUs it runs on and the argv it launches with.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import random
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools" / "sglang-oracle"
_SRT = Path(
    os.environ.get("SGLANG_SRT")
    or Path(os.environ.get("SGLANG_ORACLE_DIR", Path.home() / ".cache" / "sglang-oracle" / "0.5.16"))
    / "sglang"
    / "srt"
)
GIB = 1 << 30
MIB = 1 << 20


def require() -> None:
    """Make the oracle importable; skip (locally) or fail (``CI``) when SGLang is not unpacked."""
    if not (_SRT / "server_args.py").is_file():
        message = f"SGLang 0.5.16 is not unpacked in {_SRT}: run bash tools/sglang-oracle/setup.sh"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message, allow_module_level=True)
    if str(TOOLS) not in sys.path:
        sys.path.insert(0, str(TOOLS))


def _llm(arch: str, model_type: str, **keys: Any) -> dict[str, Any]:
    return {"architectures": [arch], "model_type": model_type, "torch_dtype": "bfloat16", **keys}


#: Published config.json values of the models (the keys SGLang's memory code and the checkpoint read).
MODELS: Mapping[str, dict[str, Any]] = {
    "Llama-3.1-8B": _llm(
        "LlamaForCausalLM", "llama", hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
        num_key_value_heads=8, num_hidden_layers=32, vocab_size=128256, max_position_embeddings=131072,
        rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    ),
    "Llama-3.1-70B": _llm(
        "LlamaForCausalLM", "llama", hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
        num_key_value_heads=8, num_hidden_layers=80, vocab_size=128256, max_position_embeddings=131072,
    ),
    "Qwen2.5-0.5B": _llm(
        "Qwen2ForCausalLM", "qwen2", hidden_size=896, intermediate_size=4864, num_attention_heads=14,
        num_key_value_heads=2, num_hidden_layers=24, vocab_size=151936, max_position_embeddings=32768,
        tie_word_embeddings=True,
    ),
    "Qwen2.5-7B": _llm(
        "Qwen2ForCausalLM", "qwen2", hidden_size=3584, intermediate_size=18944, num_attention_heads=28,
        num_key_value_heads=4, num_hidden_layers=28, vocab_size=152064, max_position_embeddings=32768,
    ),
    "Qwen2.5-32B": _llm(
        "Qwen2ForCausalLM", "qwen2", hidden_size=5120, intermediate_size=27648, num_attention_heads=40,
        num_key_value_heads=8, num_hidden_layers=64, vocab_size=152064, max_position_embeddings=32768,
    ),
    "Qwen2.5-72B": _llm(
        "Qwen2ForCausalLM", "qwen2", hidden_size=8192, intermediate_size=29568, num_attention_heads=64,
        num_key_value_heads=8, num_hidden_layers=80, vocab_size=152064, max_position_embeddings=32768,
    ),
    "Mistral-7B-v0.3": _llm(
        "MistralForCausalLM", "mistral", hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, num_hidden_layers=32, vocab_size=32768,
        max_position_embeddings=32768,
    ),
    "gemma-2-9b": _llm(
        "Gemma2ForCausalLM", "gemma2", hidden_size=3584, intermediate_size=14336, num_attention_heads=16,
        num_key_value_heads=8, head_dim=256, num_hidden_layers=42, vocab_size=256000,
        max_position_embeddings=8192, tie_word_embeddings=True, torch_dtype="float32",
    ),
    "Qwen3-8B": _llm(
        "Qwen3ForCausalLM", "qwen3", hidden_size=4096, intermediate_size=12288, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, num_hidden_layers=36, vocab_size=151936,
        max_position_embeddings=40960,
    ),
    "Qwen3-30B-A3B": _llm(
        "Qwen3MoeForCausalLM", "qwen3_moe", hidden_size=2048, intermediate_size=6144,
        moe_intermediate_size=768,
        num_experts=128, num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_hidden_layers=48,
        vocab_size=151936, max_position_embeddings=40960,
    ),
    "Mixtral-8x7B": _llm(
        "MixtralForCausalLM", "mixtral", hidden_size=4096, intermediate_size=14336, num_local_experts=8,
        num_attention_heads=32, num_key_value_heads=8, num_hidden_layers=32, vocab_size=32000,
        max_position_embeddings=32768,
    ),
    "DeepSeek-V3": _llm(
        "DeepseekV3ForCausalLM", "deepseek_v3", hidden_size=7168, intermediate_size=18432,
        moe_intermediate_size=2048, num_attention_heads=128, num_key_value_heads=128, num_hidden_layers=61,
        vocab_size=129280, max_position_embeddings=163840, kv_lora_rank=512, qk_rope_head_dim=64,
        qk_nope_head_dim=128, v_head_dim=128, q_lora_rank=1536, n_routed_experts=256, n_shared_experts=1,
        first_k_dense_replace=3, topk_method="noaux_tc", num_nextn_predict_layers=1,
        rope_scaling={"factor": 40, "original_max_position_embeddings": 4096, "type": "yarn"},
        quantization_config={"quant_method": "fp8", "weight_block_size": [128, 128]},
    ),
    "Qwen2.5-VL-7B": {
        **_llm(
            "Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl", hidden_size=3584, intermediate_size=18944,
            num_attention_heads=28, num_key_value_heads=4, num_hidden_layers=28, vocab_size=152064,
            max_position_embeddings=128000,
        ),
        "vision_config": {"depth": 32, "hidden_size": 1280, "num_heads": 16, "out_hidden_size": 3584},
    },
    "bge-m3": {
        "architectures": ["XLMRobertaModel"], "model_type": "xlm-roberta", "hidden_size": 1024,
        "intermediate_size": 4096, "num_attention_heads": 16, "num_hidden_layers": 24, "vocab_size": 250002,
        "max_position_embeddings": 8194, "type_vocab_size": 1, "torch_dtype": "float32",
    },
    "Qwen2.5-7B-fp32": _llm(
        "Qwen2ForCausalLM", "qwen2", hidden_size=3584, intermediate_size=18944, num_attention_heads=28,
        num_key_value_heads=4, num_hidden_layers=28, vocab_size=152064, max_position_embeddings=32768,
        torch_dtype="float32",
    ),
}  # fmt: skip

#: (name, total MiB as the SMI tool reports it, GPUs per node).
GPUS: Sequence[tuple[str, int, int]] = (
    ("RTX 4090", 24564, 2),
    ("L40S", 46068, 4),
    ("A100-40G", 40960, 8),
    ("A100-80G", 81920, 8),
    ("H100", 81559, 8),
    ("H200", 143771, 8),
    ("B200", 183359, 8),
    ("MI300X", 196592, 8),
)
#: GPUs SGLang runs as ROCm (``is_hip``).
ROCM = ("MI300X",)


@functools.cache
def weight_bytes(name: str) -> int:
    """The checkpoint's size (``checkpoint.total_bytes``: the safetensors total)."""
    import checkpoint

    return int(checkpoint.total_bytes(MODELS[name]))


@dataclass(frozen=True)
class Case:
    """One placement: a model, its GPUs ((total, used) bytes, in rank order), its argv and env."""

    name: str
    gpu: str
    gpus: tuple[tuple[int, int], ...]
    argv: tuple[str, ...]
    per_node: int
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def rocm(self) -> bool:
        """The GPUs run ROCm."""
        return self.gpu in ROCM

    @property
    def config(self) -> dict[str, Any]:
        """The model's config.json."""
        return MODELS[self.name]

    def row(self) -> dict[str, Any]:
        """The Contract-1 model row."""
        return {
            "id": 1,
            "name": self.name,
            "cluster_id": 1,
            "backend": "SGLang",
            "hf_config": self.config,
            "weight_bytes": weight_bytes(self.name),
            "backend_parameters": list(self.argv),
            "env": dict(self.env),
            "distributed_inference_across_workers": len(self.gpus) > self.per_node,
        }


#: Flag sets the corpus draws from (besides parallelism and the KV dtype).
_FLAGS: Sequence[tuple[str, ...]] = (
    (),
    (),
    (),
    ("--chunked-prefill-size", "4096"),
    ("--chunked-prefill-size", "-1"),
    ("--cuda-graph-max-bs", "64"),
    ("--disable-cuda-graph",),
    ("--disable-prefill-cuda-graph",),
    ("--enable-lora",),
    ("--moe-a2a-backend", "deepep"),
    ("--mem-fraction-static", "0.7"),
    ("--max-total-tokens", "1024"),
    ("--context-length", "4096"),
    ("--context-length", "1000000"),
    ("--disaggregation-mode", "prefill"),
    ("--disaggregation-mode", "decode"),
    ("--attn-cp-size", "2"),
    ("--dcp-size", "2"),
    ("--dtype", "float32"),
    ("--dtype", "bfloat16"),
    ("--max-prefill-tokens", "8192", "--chunked-prefill-size", "-1"),
    ("--cuda-graph-max-bs-prefill", "512"),
    ("--language-only",),
    ("--cuda-graph-backend-prefill", "breakable", "--enable-lora"),
)
_KV_DTYPES = ("auto", "auto", "auto", "bf16", "fp8_e4m3", "fp8_e5m2", "mxfp8", "nvfp4", "fp4_mx_block16",
              "fp16", "float16", "fp4_e2m1")  # fmt: skip
_LAYOUTS = ((1, 1, 1), (1, 1, 1), (2, 1, 1), (4, 1, 1), (8, 1, 1), (1, 2, 1), (2, 2, 1), (1, 1, 2), (2, 1, 2),
            (16, 1, 1), (8, 2, 1), (4, 4, 1))  # fmt: skip


def _outside(rng: random.Random, count: int, uniform: bool) -> list[int]:
    """Memory other processes hold on each GPU: none on most, 1–16 GiB on some."""
    if uniform:
        used = rng.choice((0, 0, rng.randint(1, 12) * GIB))
        return [used] * count
    return [rng.choice((0, 0, 0, rng.randint(1, 16) * GIB, rng.randint(1, 4) * GIB)) for _ in range(count)]


def _argv(rng: random.Random, tp: int, pp: int, dp: int) -> list[str]:
    argv: list[str] = []
    for flag, value in (("--tp-size", tp), ("--pp-size", pp), ("--dp-size", dp)):
        if value > 1:
            argv += [flag, str(value)]
    kv = rng.choice(_KV_DTYPES)
    if kv != "auto":
        argv += ["--kv-cache-dtype", kv]
    argv += rng.choice(_FLAGS)
    return argv


def _divides(config: Mapping[str, Any], tp: int) -> bool:
    """tp splits the attention heads (SGLang's ``QKVParallelLinear`` asserts it) and the vocabulary
    (GPUStack's argument check, which both policies keep): other layouts never reach SGLang."""
    return config["num_attention_heads"] % tp == 0 and config["vocab_size"] % tp == 0


def corpus(seed: int = 19, count: int = 700) -> list[Case]:
    """``count`` placements drawn from the catalogues (deterministic for a seed).

    Outside usage differs per GPU only at pp 1 without dp (where SGLang's pool depends on the
    smallest GPU alone); with pp or dp > 1 every GPU of a case holds the same outside usage, so
    which GPU runs which stage or replica does not change SGLang's figure.
    """
    rng = random.Random(seed)
    names = sorted(MODELS)
    cases = []
    while len(cases) < count:
        name = rng.choice(names)
        gpu, total, per_node = rng.choice(GPUS)
        tp, pp, dp = rng.choice(_LAYOUTS)
        if name == "DeepSeek-V3" and total < 140_000:
            tp, pp, dp = 16, 1, 1  # 671B: two nodes of 80 GiB GPUs at least
        gpus = tp * pp * dp
        if (gpus > per_node and gpus % per_node) or not _divides(MODELS[name], tp):
            continue
        used = _outside(rng, gpus, uniform=pp > 1 or dp > 1 or gpus > per_node)
        env = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"} if rng.random() < 0.15 else {}
        devices = tuple((total * MIB, u) for u in used)
        case = Case(name, gpu, devices, tuple(_argv(rng, tp, pp, dp)), per_node, env)
        if rng.random() < _BORDERLINE_SHARE:
            case = _borderline(case, rng.uniform(0.4, 1.6))
        cases.append(case)
    return cases


#: Share of cases whose outside usage is chosen to put SGLang's pool near the KV floor.
_BORDERLINE_SHARE = 0.2


def _borderline(case: Case, ratio: float) -> Case:
    """The case with the same outside usage on every GPU, chosen (by bisection on SGLang's own
    start-up at a 0.5 GiB context) so that SGLang's tokens are about ``ratio`` × the KV floor."""
    import launch

    total = case.gpus[0][0]

    def tokens(used: int) -> int:
        outcome = launch.launch(
            case.row(), case.argv, [(t, t - used) for t, _ in case.gpus], 0.5, hip=case.rocm
        )
        floor = min(outcome.context_len, 8192)
        return -1 if outcome.fatal or outcome.tokens is None else outcome.tokens - int(ratio * floor)

    if tokens(0) <= 0:
        return case
    low, high = 0, total
    for _ in range(40):
        middle = (low + high) // 2
        low, high = (middle, high) if tokens(middle) > 0 else (low, middle)
    return dataclasses.replace(case, gpus=tuple((t, low) for t, _ in case.gpus))


def workers(case: Case) -> list[dict[str, Any]]:
    """The worker rows holding exactly the case's GPUs (nodes of ``per_node`` GPUs)."""
    per_node = min(case.per_node, len(case.gpus))
    rows = []
    for node, start in enumerate(range(0, len(case.gpus), per_node)):
        devices = [
            {
                "uuid": f"GPU-{node}-{index}",
                "name": case.gpu,
                "vendor": "amd" if case.rocm else "nvidia",
                "type": "rocm" if case.rocm else "cuda",
                "index": index,
                "memory": {"total": total, "used": used, "is_unified_memory": False},
            }
            for index, (total, used) in enumerate(case.gpus[start : start + per_node])
        ]
        rows.append(
            {
                "id": node + 1,
                "name": f"node-{node}",
                "ip": f"10.0.0.{node + 1}",
                "cluster_id": 1,
                "state": "ready",
                "labels": {},
                "system_reserved": {"ram": 0, "vram": 0},
                "status": {
                    "memory": {"total": 1024 * GIB, "is_unified_memory": False},
                    "gpu_devices": devices,
                },
            }
        )
    return rows


def frees(case: Case) -> list[tuple[int, int]]:
    """(total, free) of every GPU, in rank order."""
    return [(total, total - used) for total, used in case.gpus]


def iterate(cases: Sequence[Case]) -> Iterator[tuple[int, Case]]:
    """Cases with their position (for messages)."""
    yield from enumerate(cases)
