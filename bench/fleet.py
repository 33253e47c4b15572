"""Synthetic clusters as GPUStack reports them, for the benchmarks.

:func:`gpustack_fleet` builds full ``Worker`` rows (cpu, memory, os, kernel,
filesystem and per-GPU core/temperature fields the scheduler ignores but must
still read past), with ``system_reserved``, a share of not-READY workers, four
GPU vendors/types and a mix of running instances: one to eight GPUs on one
worker, and distributed instances spanning two whole nodes. Deterministic for
a seed. :data:`BENCH_MODELS` are realistic model rows (config.json with
``model_type``, as GPUStack's ``AutoConfig`` needs) for a one-GPU, a tp-8 and a
multi-worker placement.
"""

from __future__ import annotations

import random
from typing import Any

GIB = 1 << 30

#: (type, vendor, total bytes, name, share of workers) of the fleet's GPU flavours.
FLAVOURS = (
    ("cuda", "nvidia", 85_899_345_920, "NVIDIA H100 80GB HBM3", 0.35),
    ("cuda", "nvidia", 85_899_345_920, "NVIDIA A100-SXM4-80GB", 0.25),
    ("cuda", "nvidia", 26_015_170_560, "NVIDIA GeForce RTX 4090", 0.15),
    ("rocm", "amd", 206_141_652_992, "AMD Instinct MI300X", 0.15),
    ("cann", "ascend", 68_719_476_736, "Ascend 910B", 0.10),
)
#: Share of workers that are not READY (heartbeat lost, maintenance).
NOT_READY_SHARE = 0.05

_QWEN2_7B = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
    "intermediate_size": 18944, "num_attention_heads": 28, "num_key_value_heads": 4,
    "num_hidden_layers": 28, "vocab_size": 152064, "max_position_embeddings": 32768,
    "rope_theta": 1000000.0, "torch_dtype": "bfloat16",
}
_LLAMA_70B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
    "intermediate_size": 28672, "num_attention_heads": 64, "num_key_value_heads": 8,
    "num_hidden_layers": 80, "vocab_size": 128256, "max_position_embeddings": 131072,
    "rope_theta": 500000.0, "torch_dtype": "bfloat16",
}
_DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_attention_heads": 128,
    "num_key_value_heads": 128, "num_hidden_layers": 61, "vocab_size": 129280,
    "max_position_embeddings": 163840, "n_routed_experts": 256, "n_shared_experts": 1,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
    "v_head_dim": 128, "torch_dtype": "bfloat16",
}

#: name → (config.json, weight bytes, backend parameters).
BENCH_MODELS: dict[str, tuple[dict[str, Any], int, list[str]]] = {
    "1 GPU (7B)": (_QWEN2_7B, 15_231_233_024, []),
    "8 GPUs (70B tp8)": (_LLAMA_70B, 141_107_412_992, ["--tp-size", "8"]),
    "multi-worker (671B)": (_DEEPSEEK_V3, 688_586_727_424, []),
}


def _flavour(rng: random.Random) -> tuple[str, str, int, str]:
    pick = rng.random()
    for gpu_type, vendor, total, name, share in FLAVOURS:
        if pick < share:
            return gpu_type, vendor, total, name
        pick -= share
    gpu_type, vendor, total, name, _ = FLAVOURS[0]
    return gpu_type, vendor, total, name


_Flavour = tuple[str, str, int, str]


def _gpu(rng: random.Random, worker_id: int, index: int, flavour: _Flavour) -> dict[str, Any]:
    gpu_type, vendor, total, name = flavour
    return {
        "uuid": f"GPU-{worker_id:05d}-{index}",
        "name": name,
        "vendor": vendor,
        "type": gpu_type,
        "index": index,
        "device_index": index,
        "device_chip_index": 0,
        "arch_family": "hopper" if "H100" in name else None,
        "compute_capability": "9.0" if vendor == "nvidia" else None,
        "core": {"total": 16896, "utilization_rate": round(rng.uniform(0, 100), 1)},
        "memory": {
            "total": total,
            "used": int(total * rng.uniform(0.01, 0.9)),
            "utilization_rate": round(rng.uniform(1, 90), 2),
            "is_unified_memory": False,
        },
        "temperature": round(rng.uniform(30, 80), 1),
    }


def _worker(rng: random.Random, worker_id: int) -> dict[str, Any]:
    flavour = _flavour(rng)
    ram = 2048 * GIB
    return {
        "id": worker_id,
        "name": f"node-{worker_id:05d}",
        "hostname": f"node-{worker_id:05d}",
        "ip": f"10.{worker_id // 250}.{worker_id % 250}.1",
        "ifname": "eth0",
        "port": 10150,
        "worker_uuid": f"0f3c6e0a-{worker_id:012d}",
        "cluster_id": 1,
        "labels": {"gpu": flavour[3].split()[-2].lower(), "rack": f"r{worker_id % 16}", "os": "linux"},
        "state": "not_ready" if rng.random() < NOT_READY_SHARE else "ready",
        "state_message": None,
        "unreachable": False,
        "heartbeat_time": "2026-11-30T10:00:00Z",
        "system_reserved": {"ram": 2 * GIB, "vram": GIB},
        "status": {
            "cpu": {"total": 128, "utilization_rate": round(rng.uniform(0, 60), 1)},
            "memory": {"total": ram, "used": int(ram * rng.uniform(0.05, 0.6)), "is_unified_memory": False},
            "os": {"name": "Ubuntu", "version": "22.04"},
            "kernel": {"name": "Linux", "release": "6.8.0-45-generic", "architecture": "x86_64"},
            "uptime": {"uptime": 123456.7, "boot_time": "2026-11-29T00:00:00Z"},
            "filesystem": [{"name": "/dev/nvme0n1p2", "mount_point": "/", "total": 4 << 40, "used": 1 << 40}],
            "gpu_devices": [_gpu(rng, worker_id, index, flavour) for index in range(8)],
        },
    }


def _instance(rng: random.Random, instance_id: int, workers: list[dict[str, Any]]) -> dict[str, Any]:
    host = workers[rng.randrange(len(workers))]
    devices = host["status"]["gpu_devices"]
    gpu_type, total = devices[0]["type"], devices[0]["memory"]["total"]
    fraction = 0.8
    row: dict[str, Any] = {
        "id": instance_id,
        "name": f"instance-{instance_id}",
        "model_id": 1000 + instance_id % 60,
        "model_name": f"model-{instance_id % 60}",
        "backend": "SGLang",
        "state": "running",
        "worker_id": host["id"],
        "worker_name": host["name"],
        "gpu_type": gpu_type,
    }
    if rng.random() < 0.03:  # a distributed instance over two whole nodes
        follower = workers[rng.randrange(len(workers))]
        indexes = list(range(8))
        claim = {str(i): int(total * fraction) for i in indexes}
        row.update(gpu_indexes=indexes, computed_resource_claim={"vram": claim, "vram_utilization": None})
        if follower["id"] != host["id"]:
            row["distributed_servers"] = {
                "subordinate_workers": [{
                    "worker_id": follower["id"], "worker_name": follower["name"], "gpu_type": gpu_type,
                    "gpu_indexes": indexes, "total_gpus": 8,
                    "computed_resource_claim": {"vram": claim, "vram_utilization": fraction},
                }]
            }
        return row
    count = rng.choice((1, 1, 1, 2, 2, 4, 8))
    indexes = sorted(rng.sample(range(8), count))
    share = rng.choice((0.2, 0.45, 0.8)) if count == 1 else fraction
    row.update(
        gpu_indexes=indexes,
        computed_resource_claim={
            "vram": {str(i): int(total * share) for i in indexes},
            "vram_utilization": share,
        },
    )
    return row


Rows = list[dict[str, Any]]


def gpustack_fleet(workers: int, instances: int, seed: int = 7) -> tuple[Rows, Rows]:
    """``workers`` full GPUStack worker rows (8 GPUs each) and ``instances`` running instances."""
    rng = random.Random(seed)
    rows = [_worker(rng, worker_id) for worker_id in range(1, workers + 1)]
    placed = [_instance(rng, instance_id, rows) for instance_id in range(1, instances + 1)]
    return rows, placed


def bench_request(
    model_name: str, workers: list[dict[str, Any]], instances: list[dict[str, Any]]
) -> dict[str, Any]:
    """A Contract 1 request placing one of :data:`BENCH_MODELS` on the fleet."""
    config, weight_bytes, params = BENCH_MODELS[model_name]
    return {
        "request_id": "bench",
        "model": {
            "id": 1, "name": "bench", "backend": "SGLang", "source": "huggingface",
            "huggingface_repo_id": f"bench/{config['model_type']}", "cluster_id": 1,
            "categories": ["llm"], "backend_parameters": list(params), "replicas": 1,
            "placement_strategy": "spread", "hf_config": config, "weight_bytes": weight_bytes,
        },
        "workers": workers,
        "model_instances": instances,
    }
