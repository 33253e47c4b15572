"""Small builders for GPUStack-shaped rows used across the engine tests.

GPU totals are the exact byte counts GPUStack's fixtures report (``tests/fixtures/workers/*.json``).
"""

from __future__ import annotations

from typing import Any

GIB = 1 << 30
MIB = 1 << 20

RTX_4080 = 17_171_480_576  # 16376 MiB
RTX_4090 = 26_015_170_560  # 24810 MiB
RTX_4090_SMALL = 25_757_220_864  # 24564 MiB (the second 4090 fixture)
H100 = 85_899_345_920  # 81920 MiB
H200 = 151_511_121_920  # 144492 MiB
ASCEND_910B = 68_719_476_736  # 65536 MiB
MI300X = 206_141_652_992  # 196592 MiB


#: Meta-Llama-3-8B's config.json (the keys placement reads, as published).
LLAMA_3_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rope_scaling": None,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}


def gpu(
    index: int, total: int, *, type_: str = "cuda", vendor: str = "nvidia", **extra: Any
) -> dict[str, Any]:
    """A ``GPUDeviceStatus`` row."""
    return {
        "uuid": f"GPU-{type_}-{index}",
        "name": extra.pop("name", "GPU"),
        "vendor": vendor,
        "type": type_,
        "index": index,
        "device_index": index,
        "memory": {"total": total, "is_unified_memory": False, "used": 0, "allocated": None},
        **extra,
    }


def worker(
    worker_id: int,
    name: str,
    gpus: list[dict[str, Any]],
    *,
    state: str = "ready",
    ram: int = 256 * GIB,
    labels: dict[str, str] | None = None,
    reserved_vram: int = 0,
    reserved_ram: int = 0,
    cluster_id: int | None = 1,
) -> dict[str, Any]:
    """A GPUStack ``Worker`` row."""
    return {
        "id": worker_id,
        "name": name,
        "hostname": name,
        "ip": f"192.168.50.{worker_id}",
        "cluster_id": cluster_id,
        "labels": labels if labels is not None else {"os": "linux"},
        "state": state,
        "system_reserved": {"ram": reserved_ram, "vram": reserved_vram},
        "status": {"memory": {"total": ram, "is_unified_memory": False}, "gpu_devices": gpus},
    }


def uniform_worker(worker_id: int, name: str, count: int, total: int, **kwargs: Any) -> dict[str, Any]:
    """A worker with ``count`` identical CUDA GPUs."""
    return worker(worker_id, name, [gpu(i, total) for i in range(count)], **kwargs)


def instance(
    instance_id: int,
    worker_id: int,
    claims: dict[int, int],
    *,
    model_id: int = 99,
    gpu_type: str | None = "cuda",
    ram: int | None = None,
    subordinates: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A ``ModelInstance`` row holding ``claims`` (GPU index → bytes) on ``worker_id``."""
    row: dict[str, Any] = {
        "id": instance_id,
        "name": f"inst-{instance_id}",
        "model_id": model_id,
        "backend": "SGLang",
        "state": "running",
        "worker_id": worker_id,
        "gpu_type": gpu_type,
        "gpu_indexes": sorted(claims),
        "computed_resource_claim": {"vram": {str(k): v for k, v in claims.items()}, "ram": ram},
    }
    if subordinates:
        row["distributed_servers"] = {"subordinate_workers": subordinates}
    return row


def model(**overrides: Any) -> dict[str, Any]:
    """An SGLang ``Model`` row; a Qwen2.5-7B-shaped LLM unless overridden."""
    row: dict[str, Any] = {
        "id": 1,
        "name": "qwen2.5-7b",
        "backend": "SGLang",
        "backend_parameters": [],
        "categories": ["llm"],
        "replicas": 1,
        "placement_strategy": "spread",
        "cluster_id": 1,
        "hf_config": {
            "architectures": ["Qwen2ForCausalLM"],
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "hidden_size": 3584,
            "num_hidden_layers": 28,
            "vocab_size": 152064,
            "max_position_embeddings": 32768,
        },
        "weight_bytes": 15_231_233_024,
    }
    row.update(overrides)
    return row


def first_gpu_selector(worker: Any) -> dict[str, Any] | None:
    """A manual pick (``gpu_selector``) of a validated worker's first GPU; None when it has none."""
    if not worker.gpus:
        return None
    first = worker.gpus[0]
    return {"gpu_ids": [f"{worker.name}:{first.type}:{first.index}"]}


def weight_for_estimate(gib: float) -> int:
    """Weight bytes whose LLM estimate ``int(w × 1.2) + 2 GiB`` prints as ``gib``."""
    return int(((gib * GIB) - 2 * GIB) / 1.2) + 1


def view(
    worker_id: int,
    totals: list[int],
    *,
    name: str | None = None,
    ip: str | None = None,
    type_: str = "cuda",
    vendor: str = "nvidia",
) -> Any:
    """A core ``WorkerView`` (ready, nothing reserved) with one GPU per entry of ``totals``."""
    from types import MappingProxyType

    from scheduler_core.workers import Gpu, WorkerView

    return WorkerView(
        id=worker_id,
        name=name or f"w{worker_id}",
        ip=ip,
        ifname=None,
        cluster_id=None,
        labels=MappingProxyType({}),
        state="ready",
        reserved_ram=0,
        reserved_vram=0,
        ram_total=0,
        is_unified_memory=False,
        gpus=tuple(Gpu(type_, i, t, vendor) for i, t in enumerate(totals)),
    )


def request(
    model_row: dict[str, Any],
    workers: list[dict[str, Any]],
    instances: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A Contract 1 request."""
    return {
        "request_id": "test",
        "model": model_row,
        "workers": workers,
        "model_instances": instances or [],
        **extra,
    }
