"""Seeded generator of realistic Contract-1 scheduling requests.

``scenario(seed, index)`` is a pure function of its two arguments (its own
``random.Random`` is seeded with both), so a scenario is named by its id
``"<seed>-<index>"`` and can be rebuilt from it alone; ``generate(seed, count)``
yields the first ``count`` of a seed.

What is drawn, and why it looks like a real GPUStack cluster:

- 1–60 workers, mostly one kind of machine per cluster (4080/4090/A10/L40S,
  A100 40/80 GiB, H100, H200, MI300X as ``rocm``, Ascend 910B as ``cann``, a
  GB10 with unified memory), 1/2/4/8 GPUs each, driver-reported memory totals,
  a few workers not READY, in another cluster, or with other labels;
- busy clusters: running instances whose claims are ``int(total × fraction)``
  as SGLang/vLLM book them, small non-LLM instances, distributed instances with
  subordinate workers, replicas of the model being scheduled;
- the model: LLMs, VLMs (``vision_config``), embedding and reranker models,
  diffusion (``categories: ["image"]``), text-to-speech, with their published
  ``config.json`` and weight sizes; spread or binpack, replicas, LoRA adapters,
  extended KV cache, ``GPUSTACK_MODEL_VRAM_CLAIM``, ``backend: null``;
- backend parameters in every form ``argforms`` knows, including values that
  GPUStack must refuse (heads not divisible by tp, tp not divisible by nnodes,
  pipeline parallelism with speculative decoding, ...);
- selectors: cluster, labels, manual ``gpu_ids`` (with ``gpus_per_replica``
  0/unset/set, overcommit, world-size mismatches with and without
  ``GPUSTACK_SKIP_GPU_COUNT_CHECK``), and selections across workers as a real
  GPUStack sends them (``manual_across_workers``: the leader's GPUs, then other
  workers' ids out of order, on subordinates with mixed card sizes or another
  vendor's GPU 0 before or after their own).

Rare inputs that trigger a deliberate difference (README, "Deliberate
differences") are drawn too, at a low rate, and tagged.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.parity import argforms
from tests.parity.catalog import (
    DIFFUSION,
    EMBEDDINGS,
    GIB,
    GPU_KINDS,
    KIND_WEIGHTS,
    LLMS,
    LORAS,
    MIB,
    TTS,
    VLMS,
    GpuKind,
    ModelEntry,
)

Json = dict[str, Any]

#: Fractions SGLang computes for real cards (``--mem-fraction-static``) and vLLM's default.
FRACTIONS = (0.9, 0.88, 0.877, 0.871, 0.85, 0.838, 0.82, 0.8, 0.791, 0.75, 0.7)
NOT_READY_STATES = ("not_ready", "unreachable", "maintenance", "initializing", "provisioning")
INSTANCE_STATES = (
    "running",
    "running",
    "running",
    "running",
    "starting",
    "scheduled",
    "downloading",
    "error",
    "initializing",
)


@dataclass(frozen=True)
class Scenario:
    """One generated request with its stable id and feature tags."""

    id: str
    tags: tuple[str, ...]
    request: Json


def generate(seed: int, count: int) -> Iterator[Scenario]:
    """The first ``count`` scenarios of ``seed``."""
    for index in range(count):
        yield scenario(seed, index)


def scenario(seed: int, index: int) -> Scenario:
    """Scenario ``index`` of ``seed``: a pure function of the two."""
    builder = _Builder(random.Random(f"gpusched-parity:{seed}:{index}"))
    request = builder.build(f"{seed}-{index}")
    return Scenario(id=f"{seed}-{index}", tags=tuple(sorted(builder.tags)), request=request)


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example_scenarios() -> Iterator[Scenario]:
    """Every request in examples/, as fixed scenarios named ``example:<file stem>``."""
    for path in sorted(EXAMPLES.glob("*.json")):
        yield Scenario(id=f"example:{path.stem}", tags=("example",), request=json.loads(path.read_text()))


def scenario_by_id(scenario_id: str) -> Scenario:
    """A scenario from its id: ``<seed>-<index>`` or ``example:<file stem>``."""
    if scenario_id.startswith("example:"):
        return next(s for s in example_scenarios() if s.id == scenario_id)
    seed, index = scenario_id.split("-")
    return scenario(int(seed), int(index))


def _weighted(rng: random.Random, table: dict[Any, float]) -> Any:
    keys = list(table)
    return rng.choices(keys, weights=[table[k] for k in keys])[0]


class _Builder:
    """Draws one request; ``tags`` names the features it used."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.tags: set[str] = set()
        self.cluster_id = 1
        self.big = False
        self.next_instance_id = 100 + rng.randint(0, 50)

    def tag(self, *names: str) -> None:
        self.tags.update(names)

    # ------------------------------------------------------------------ request
    def build(self, request_id: str) -> Json:
        rng = self.rng
        self.cluster_id = _weighted(rng, {1: 6, 2: 1, 7: 1})
        workload = _weighted(
            rng,
            {"llm": 48, "big": 14, "vlm": 10, "embedding": 9, "diffusion": 11, "tts": 4, "no_worker": 0.5},
        )
        self.tag(f"workload:{workload}")
        self.big = workload == "big"
        workload = "llm" if self.big else workload
        workers = self.cluster()
        entry = self.entry(workload)
        model = self.model(entry, workload)
        instances = self.instances(workers, model)
        self.selectors(model, workers, workload)
        model["backend_parameters"] = self.parameters(model, workers, workload, entry)
        return {
            "request_id": request_id,
            "policy": "gpustack",
            "model": model,
            "workers": workers,
            "model_instances": instances,
        }

    # ------------------------------------------------------------------ cluster
    def worker_count(self) -> int:
        rng = self.rng
        band = _weighted(rng, {(1, 1): 14, (2, 4): 30, (5, 8): 22, (9, 16): 18, (17, 32): 10, (33, 60): 6})
        return rng.randint(*band)

    def cluster(self) -> list[Json]:
        rng = self.rng
        if "workload:no_worker" in self.tags:
            self.tag("no_workers")
            return []
        if self.big:  # a model larger than one node, on a few multi-GPU nodes: the multi-worker strategy
            count = rng.randint(2, 8) if rng.random() < 0.75 else rng.randint(9, 16)
            layout = _weighted(rng, {"uniform": 70, "counts": 30})
            kinds = [self.kind(big=True)]
        else:
            count = self.worker_count()
            layout = _weighted(rng, {"uniform": 54, "counts": 20, "kinds": 22, "odd_worker": 4})
            kinds = [self.kind() for _ in range(rng.randint(2, 3))] if layout == "kinds" else [self.kind()]
        self.tag(f"cluster:{layout}")
        fixed = rng.choice(kinds[0].per_host)
        workers = []
        for n in range(count):
            kind = rng.choice(kinds)
            per_host = fixed if layout == "uniform" else rng.choice((*kind.per_host, 1, 2, 4, 8))
            workers.append(self.worker(n, count, kind, per_host))
        with_gpus = [w for w in workers if w["status"]["gpu_devices"]]
        discrete = [
            w for w in with_gpus if not w["status"]["memory"]["is_unified_memory"]
        ]  # one SoC GPU only
        if layout == "odd_worker" and discrete:
            self.odd_worker(rng.choice(discrete))
        self.sprinkle_rare(with_gpus)
        return workers

    def kind(self, big: bool = False) -> GpuKind:
        weights = {k: w for k, w in KIND_WEIGHTS.items() if not big or max(GPU_KINDS[k].per_host) >= 4}
        return GPU_KINDS[_weighted(self.rng, weights)]

    def worker(self, n: int, count: int, kind: GpuKind, per_host: int) -> Json:
        rng = self.rng
        per_host = 1 if kind.unified else per_host
        if not self.big and rng.random() < 0.015:
            per_host = 0  # a CPU-only worker
            self.tag("cpu_worker")
        worker_id = n + 1
        name = f"{kind.slug.replace('.', '')}-{'node' if count < 10 else 'n'}{n + 1:02d}"
        state = "ready" if rng.random() < 0.93 else rng.choice(NOT_READY_STATES)
        if state != "ready":
            self.tag("worker_not_ready")
        cluster_id = self.cluster_id if rng.random() < 0.95 else self.cluster_id + 1
        if cluster_id != self.cluster_id:
            self.tag("other_cluster_worker")
        ram = int(rng.choice(kind.host_ram_gib) * GIB * rng.uniform(0.96, 1.0)) // MIB * MIB
        worker: Json = {
            "id": worker_id,
            "name": name,
            "hostname": name,
            "ip": f"10.{self.cluster_id}.{n // 200}.{n % 200 + 10}",
            "port": 10150,
            "cluster_id": cluster_id,
            "labels": self.labels(kind),
            "state": state,
            "state_message": None if state == "ready" else "Worker heartbeat lost",
            "unreachable": state == "unreachable",
            "status": {
                "cpu": {"total": rng.choice((32, 64, 96, 128, 192)), "utilization_rate": rng.uniform(1, 40)},
                "memory": {
                    "total": ram,
                    "used": int(ram * rng.uniform(0.05, 0.5)),
                    "utilization_rate": rng.uniform(5, 50),
                    "is_unified_memory": kind.unified,
                },
                "gpu_devices": self.gpus(kind, per_host),
            },
        }
        worker["system_reserved"] = self.reserved()
        return worker

    def labels(self, kind: GpuKind) -> dict[str, str]:
        rng = self.rng
        labels = {"os": "linux", "arch": "arm64" if kind.unified else "amd64", "gpu": kind.slug}
        if rng.random() < 0.6:
            labels["zone"] = rng.choice(("zone-a", "zone-b"))
        if rng.random() < 0.4:
            labels["tier"] = rng.choice(("prod", "dev"))
        return labels

    def reserved(self) -> Any:
        rng = self.rng
        choice = _weighted(rng, {"zero": 35, "default": 35, "legacy": 15, "large": 15})
        return {
            "zero": {"ram": 0, "vram": 0},
            "default": {"ram": 2 * GIB, "vram": 1 * GIB},
            "legacy": {"memory": 2 * GIB, "gpu_memory": rng.choice((0, 1 * GIB, 2 * GIB))},
            "large": {"ram": 16 * GIB, "vram": rng.choice((2, 4, 6)) * GIB},
        }[choice]

    def gpu(self, kind: GpuKind, index: int) -> Json:
        rng = self.rng
        return {
            "uuid": f"GPU-{rng.getrandbits(64):016x}",
            "name": kind.name,
            "vendor": kind.vendor,
            "type": kind.type,
            "index": index,
            "device_index": index,
            "device_chip_index": 0,
            "arch_family": kind.arch,
            "compute_capability": kind.arch if kind.vendor == "nvidia" else None,
            "core": {"total": kind.cores, "utilization_rate": round(rng.uniform(0, 60), 1)},
            "memory": {
                "total": kind.total,
                "used": int(kind.total * rng.uniform(0.0, 0.05)),
                "utilization_rate": round(rng.uniform(0, 5), 2),
                "is_unified_memory": kind.unified,
            },
            "temperature": round(rng.uniform(30, 70), 1),
        }

    def gpus(self, kind: GpuKind, count: int) -> list[Json]:
        """A host's GPUs: indexes 0..n-1, or with gaps (a card hidden or failed), rarely out of order."""
        rng = self.rng
        indexes = list(range(count))
        if count > 1 and rng.random() < 0.03:
            indexes = sorted(rng.sample(range(count + 2), count))
            self.tag("gpu_index_gaps")
        if count > 1 and rng.random() < 0.02:
            rng.shuffle(indexes)
            self.tag("gpu_order_shuffled")
        return [self.gpu(kind, i) for i in indexes]

    def odd_worker(self, worker: Json) -> None:
        """A mixed CUDA/ROCm box, a box with two card sizes, or two GPUs reporting one (type, index)."""
        rng = self.rng
        devices = worker["status"]["gpu_devices"]
        odd = rng.random()
        if odd < 0.3:
            same_type = [
                k for k in GPU_KINDS.values() if k.type == devices[0]["type"] and k.name != devices[0]["name"]
            ]
            if same_type:
                top = max(g["index"] for g in devices)
                devices += [self.gpu(rng.choice(same_type), top + 1 + i) for i in range(rng.choice((1, 2)))]
                self.tag("mixed_size_worker")
        elif odd < 0.75:
            other = GPU_KINDS["mi300x"] if devices[0]["type"] != "rocm" else GPU_KINDS["h100"]
            start = 0 if rng.random() < 0.6 else len(devices)
            devices += [self.gpu(other, start + i) for i in range(rng.choice((1, 2)))]
            self.tag("mixed_vendor_worker")
        else:
            devices.append(dict(devices[-1], uuid=f"GPU-{rng.getrandbits(64):016x}"))
            self.tag("shared_type_index")

    def sprinkle_rare(self, workers: list[Json]) -> None:
        """A zero-size GPU, or a worker whose ``system_reserved`` is null or absent (both rare)."""
        rng = self.rng
        if not workers:
            return
        if rng.random() < 0.004:
            gpu = rng.choice(rng.choice(workers)["status"]["gpu_devices"])
            gpu["memory"] = dict(gpu["memory"], total=0, used=0)
            self.tag("zero_size_gpu")
        if rng.random() < 0.006:
            worker = rng.choice(workers)
            if rng.random() < 0.5:
                worker["system_reserved"] = None
            else:
                del worker["system_reserved"]
            self.tag("system_reserved_null")

    # ------------------------------------------------------------------ model
    def entry(self, workload: str) -> ModelEntry:
        table = {
            "llm": LLMS,
            "vlm": VLMS,
            "embedding": EMBEDDINGS,
            "diffusion": DIFFUSION,
            "tts": TTS,
            "no_worker": LLMS,
        }[workload]
        if self.big:
            table = tuple(e for e in LLMS + VLMS if e.weight_bytes > 60 * 10**9)
        entry: ModelEntry = self.rng.choice(table)
        self.tag(f"model:{entry.key}")
        return entry

    def model(self, entry: ModelEntry, workload: str) -> Json:
        rng = self.rng
        model: Json = {
            "id": rng.randint(1, 400),
            "name": entry.key.replace(".", "-"),
            "backend": "SGLang",
            "backend_version": rng.choice(("0.5.6", "0.5.4", None)),
            "categories": list(entry.categories),
            "replicas": 1,
            "placement_strategy": rng.choice(("spread", "binpack")),
            "cluster_id": self.cluster_id,
            "description": None,
            "meta": {},
            "restart_on_error": True,
        }
        self.tag(f"placement:{model['placement_strategy']}")
        self.source(model, entry)
        self.optional_model_fields(model, workload)
        return model

    def source(self, model: Json, entry: ModelEntry) -> None:
        rng = self.rng
        source = _weighted(rng, {"huggingface": 82, "model_scope": 14, "local_path": 4})
        if source == "huggingface":
            model.update(source="huggingface", huggingface_repo_id=entry.repo)
        elif source == "model_scope":
            model.update(source="model_scope", model_scope_model_id=entry.repo)
        else:  # a folder on the workers (not on this machine): config and size come from the request
            model.update(source="local_path", local_path=f"/data/models/{entry.repo.split('/')[1]}")
        self.tag(f"source:{source}")
        if entry.config is not None:
            model["hf_config"] = entry.config
        if rng.random() < 0.97:
            model["weight_bytes"] = entry.weight_bytes
        else:
            self.tag("weight_unknown")

    def optional_model_fields(self, model: Json, workload: str) -> None:
        rng = self.rng
        backend = _weighted(rng, {"SGLang": 80, "sglang": 4, None: 8, "missing": 8})
        if backend == "missing":
            del model["backend"]
        else:
            model["backend"] = backend
        if backend is None:
            self.tag("backend_null")
        if workload == "llm" and rng.random() < 0.08:
            model["categories"] = []
            self.tag("categories_empty")
        if rng.random() < 0.2:
            model["replicas"] = rng.randint(2, 4)
            self.tag("replicas")
        model["distributed_inference_across_workers"] = _weighted(rng, {True: 40, None: 50, False: 10})
        if model["cluster_id"] is not None and rng.random() < 0.02:
            model["cluster_id"] = None
            self.tag("model_cluster_null")
        if workload in ("llm", "vlm", "embedding") and rng.random() < 0.12:
            model["extended_kv_cache"] = self.extended_kv_cache()
        if workload == "llm" and rng.random() < 0.08:
            model["lora_list"] = self.loras()
        if rng.random() < 0.04:
            claim = model.get("weight_bytes", 8 * GIB) * rng.uniform(0.6, 1.6)
            model["env"] = {"GPUSTACK_MODEL_VRAM_CLAIM": str(int(claim))}
            self.tag("env_vram_claim")

    def extended_kv_cache(self) -> Json:
        rng = self.rng
        shape = _weighted(rng, {"ratio": 45, "size": 30, "default": 15, "disabled": 10})
        self.tag(f"extended_kv_cache:{shape}")
        return {
            "ratio": {"enabled": True, "ram_ratio": rng.choice((0.5, 1.0, 1.2, 2.0, 4.0)), "ram_size": None},
            "size": {"enabled": True, "ram_ratio": 1.2, "ram_size": rng.choice((16, 64, 128, 256, 512))},
            "default": {"enabled": True},
            "disabled": {"enabled": False, "ram_ratio": 2.0},
        }[shape]

    def loras(self) -> list[Json]:
        self.tag("lora")
        chosen = self.rng.sample(LORAS, self.rng.randint(1, 2))
        return [
            {"name": repo.split("/")[1], "huggingface_repo_id": repo, "weight_bytes": size}
            for repo, size in chosen
        ]

    # ------------------------------------------------------------------ instances
    def instances(self, workers: list[Json], model: Json) -> list[Json]:
        rng = self.rng
        busy = _weighted(rng, {0.0: 25, 0.3: 35, 0.6: 28, 0.95: 12})
        if busy:
            self.tag("busy_cluster")
        free = {
            (w["id"], g["index"], g["type"]): g["memory"]["total"]
            for w in workers
            for g in w["status"]["gpu_devices"]
        }
        out: list[Json] = []
        if rng.random() < 0.18 * (busy > 0):
            out += self.distributed_instances(workers, free)
        for worker in workers:
            if rng.random() < busy:
                out += self.worker_instances(worker, free, model)
        if rng.random() < 0.05:
            out.append(self.pending_instance(model))
        if out and rng.random() < 0.03:  # an instance left on a worker that was since removed
            stale = dict(
                rng.choice(out), id=self.next_instance_id + 1, worker_id=999, worker_name="decommissioned"
            )
            stale.pop("distributed_servers", None)
            out.append(stale)
            self.tag("stale_instance")
        return out

    def pending_instance(self, model: Json) -> Json:
        """A replica not placed yet: no worker, no GPUs, no claim."""
        self.tag("pending_instance")
        self.next_instance_id += 1
        return {
            "id": self.next_instance_id,
            "name": f"{model['name']}-{self.rng.getrandbits(24):06x}",
            "model_id": model["id"],
            "model_name": model["name"],
            "backend": "SGLang",
            "state": "pending",
            "worker_id": None,
            "gpu_type": None,
            "gpu_indexes": [],
            "computed_resource_claim": None,
        }

    def new_instance(
        self,
        worker: Json,
        gpu_type: str | None,
        indexes: list[int],
        claims: dict[str, int],
        fraction: float | None,
        model_id: int,
        model_name: str,
        backend: str = "SGLang",
    ) -> Json:
        rng = self.rng
        self.next_instance_id += 1
        return {
            "id": self.next_instance_id,
            "name": f"{model_name}-{rng.getrandbits(24):06x}",
            "model_id": model_id,
            "model_name": model_name,
            "backend": backend,
            "state": rng.choice(INSTANCE_STATES),
            "worker_id": worker["id"],
            "worker_name": worker["name"],
            "worker_ip": worker["ip"],
            "gpu_type": gpu_type,
            "gpu_indexes": indexes,
            "computed_resource_claim": {"vram": claims, "ram": None, "vram_utilization": fraction},
        }

    def worker_instances(
        self, worker: Json, free: dict[tuple[int, int, str], int], model: Json
    ) -> list[Json]:
        rng = self.rng
        out = []
        devices = list(worker["status"]["gpu_devices"])
        for _ in range(rng.randint(1, 3)):
            if not devices:
                break
            pick = _weighted(
                rng, {"llm": 55, "small": 25, "same_model": 12 if model["replicas"] > 1 else 0, "vllm": 8}
            )
            width = min(len(devices), rng.choice((1, 1, 2, 4, 8)))
            start = rng.randrange(0, len(devices) - width + 1)
            chosen = devices[start : start + width]
            instance = self.instance_on(worker, chosen, free, pick, model)
            if instance is not None:
                out.append(instance)
        return out

    def instance_on(
        self, worker: Json, chosen: list[Json], free: dict[tuple[int, int, str], int], pick: str, model: Json
    ) -> Json | None:
        rng = self.rng
        gpu_type = chosen[0]["type"]
        chosen = [g for g in chosen if g["type"] == gpu_type]
        if pick == "small":
            per_gpu = int(rng.uniform(1.2, 14.0) * GIB)
            fraction = None
            claims = {str(g["index"]): per_gpu for g in chosen[:1]}
        else:
            fraction = 0.9 if pick == "vllm" else rng.choice(FRACTIONS)
            claims = {str(g["index"]): int(g["memory"]["total"] * fraction) for g in chosen}
        keys = [(worker["id"], int(i), gpu_type) for i in claims]
        if any(free.get(key, 0) < claims[str(key[1])] for key in keys):
            return None
        for key in keys:
            free[key] -= claims[str(key[1])]
        model_id, name = (
            (model["id"], model["name"])
            if pick == "same_model"
            else (
                rng.randint(401, 900),
                rng.choice(("qwen3-8b", "llama3-8b", "bge-m3", "flux-dev", "glm4-9b")),
            )
        )
        if pick == "same_model":
            self.tag("replica_instances")
        instance = self.new_instance(
            worker,
            gpu_type,
            [int(i) for i in claims],
            claims,
            fraction,
            model_id,
            name,
            backend="vLLM" if pick == "vllm" else "SGLang",
        )
        if rng.random() < 0.005:
            instance["gpu_type"] = None
            self.tag("instance_gpu_type_null")
        if model.get("extended_kv_cache") and rng.random() < 0.3:
            instance["computed_resource_claim"]["ram"] = int(sum(claims.values()) * 1.2)
        return instance

    def distributed_instances(self, workers: list[Json], free: dict[tuple[int, int, str], int]) -> list[Json]:
        """A distributed SGLang instance on 2–3 whole workers of one GPU count (``_create_candidate``)."""
        rng = self.rng
        groups: dict[tuple[str, int], list[Json]] = {}
        for w in workers:
            devices = w["status"]["gpu_devices"]
            if devices and all(
                free[(w["id"], g["index"], g["type"])] == g["memory"]["total"] for g in devices
            ):
                groups.setdefault((devices[0]["type"], len(devices)), []).append(w)
        eligible = [g for g in groups.values() if len(g) >= 2]
        if not eligible:
            return []
        group = rng.choice(eligible)
        members = rng.sample(group, min(rng.choice((2, 2, 3)), len(group)))
        fraction = rng.choice(FRACTIONS)
        self.tag("distributed_instance")

        def claims_of(worker: Json) -> dict[str, int]:
            for g in worker["status"]["gpu_devices"]:
                free[(worker["id"], g["index"], g["type"])] -= int(g["memory"]["total"] * fraction)
            return {
                str(g["index"]): int(g["memory"]["total"] * fraction) for g in worker["status"]["gpu_devices"]
            }

        head, *rest = members
        gpu_type = head["status"]["gpu_devices"][0]["type"]
        instance = self.new_instance(
            head,
            gpu_type,
            [g["index"] for g in head["status"]["gpu_devices"]],
            claims_of(head),
            None,
            rng.randint(401, 900),
            "deepseek-r1",
        )
        instance["distributed_servers"] = {
            "mode": "delegated",
            "subordinate_workers": [
                {
                    "worker_id": w["id"],
                    "worker_name": w["name"],
                    "worker_ip": w["ip"],
                    "total_gpus": len(w["status"]["gpu_devices"]),
                    "gpu_type": gpu_type,
                    "gpu_indexes": [g["index"] for g in w["status"]["gpu_devices"]],
                    "computed_resource_claim": {
                        "vram": claims_of(w),
                        "ram": None,
                        "vram_utilization": fraction,
                    },
                }
                for w in rest
            ],
        }
        return [instance]

    # ------------------------------------------------------------------ selectors
    def selectors(self, model: Json, workers: list[Json], workload: str) -> None:
        rng = self.rng
        selector = _weighted(rng, {"none": 55, "empty": 15, "label": 14, "label_miss": 2})
        if selector == "empty":
            model["worker_selector"] = {}
        elif selector.startswith("label") and workers:
            labels = rng.choice(workers)["labels"]
            key = rng.choice(sorted(labels))
            value = labels[key] if selector == "label" else "h800"
            model["worker_selector"] = {key: value}
            self.tag("label_selector")
        if workers and rng.random() < (0.22 if workload != "tts" else 0.1):
            self.manual(model, workers)

    def manual(self, model: Json, workers: list[Json]) -> None:
        rng = self.rng
        self.tag("manual")
        with_gpus = [w for w in workers if w["status"]["gpu_devices"]]
        if not with_gpus:
            return
        chosen_workers = rng.sample(with_gpus, min(len(with_gpus), _weighted(rng, {1: 70, 2: 24, 3: 6})))
        if len(chosen_workers) > 1 and rng.random() < 0.4:
            self.manual_across_workers(model, chosen_workers)
            return
        gpu_ids: list[str] = []
        for worker in chosen_workers:
            devices = worker["status"]["gpu_devices"]
            take = rng.choice(sorted({1, len(devices) // 2 or 1, len(devices)}))
            for gpu in rng.sample(devices, take):
                gpu_ids.append(f"{worker['name']}:{gpu['type']}:{gpu['index']}")
            if rng.random() < 0.02:  # a card that has since failed and is no longer reported
                gpu_ids.append(
                    f"{worker['name']}:{devices[0]['type']}:{max(g['index'] for g in devices) + 1}"
                )
                self.tag("manual_absent_gpu")
        if len(chosen_workers) > 1:
            self.tag("manual_multi_worker")
        if rng.random() < 0.04:
            gpu_ids.append(f"retired-node:{gpu_ids[0].split(':')[1]}:0")
            self.tag("manual_missing_worker")
        if rng.random() < 0.005:
            gpu_ids.append(gpu_ids[0])
            self.tag("duplicate_gpu_ids")
        selector: Json = {"gpu_ids": gpu_ids}
        per_replica = _weighted(rng, {"unset": 50, "zero": 10, "all": 12, "part": 28})
        if per_replica != "unset":
            count = {"zero": 0, "all": len(gpu_ids), "part": max(1, len(gpu_ids) // 2)}[per_replica]
            selector["gpus_per_replica"] = count
            self.tag(f"gpus_per_replica:{per_replica}")
        model["gpu_selector"] = selector

    def manual_across_workers(self, model: Json, chosen: list[Json]) -> None:
        """A selection spread over several workers (GPUStack's manual multi-worker candidate), as a
        real GPUStack sends it: the leader's GPUs, then each other worker's GPU ids in the order the
        user clicked them (out of order), on subordinates that mix card sizes or also carry another
        vendor's GPU 0 (listed before or after their own GPUs)."""
        rng = self.rng
        self.tag("manual", "manual_multi_worker", "manual_across_workers")
        gpu_type = chosen[0]["status"]["gpu_devices"][0]["type"]
        gpu_ids: list[str] = []
        for position, worker in enumerate(chosen):
            if position:
                self.vary_subordinate(worker)
            own = [g for g in worker["status"]["gpu_devices"] if g["type"] == gpu_type]
            picked = own if position == 0 else rng.sample(own, rng.randint(1, len(own))) if own else []
            gpu_ids += [f"{worker['name']}:{gpu_type}:{g['index']}" for g in picked]
        model["gpu_selector"] = {"gpu_ids": gpu_ids}

    def vary_subordinate(self, worker: Json) -> None:
        """Mix card sizes on ``worker`` and/or give it another vendor's GPU 0."""
        rng = self.rng
        devices = worker["status"]["gpu_devices"]
        first = devices[0]
        if len(devices) > 1 and rng.random() < 0.6:
            sizes = [k for k in GPU_KINDS.values() if k.type == first["type"] and not k.unified]
            for gpu in rng.sample(devices, rng.randint(1, len(devices) - 1)):
                gpu["memory"] = dict(gpu["memory"], total=rng.choice(sizes).total)
            self.tag("subordinate_mixed_sizes")
        if rng.random() < 0.5:
            other = GPU_KINDS["mi300x"] if first["type"] != "rocm" else GPU_KINDS["h100"]
            extra = self.gpu(other, 0)
            if rng.random() < 0.7:
                devices.insert(0, extra)
                self.tag("subordinate_other_vendor_first")
            else:
                devices.append(extra)
                self.tag("subordinate_other_vendor_last")
            self.tag("mixed_vendor_worker")

    # ------------------------------------------------------------------ parameters
    def parameters(self, model: Json, workers: list[Json], workload: str, entry: ModelEntry) -> list[str]:
        rng = self.rng
        pairs = (
            self.diffusion_pairs(model) if workload == "diffusion" else self.llm_pairs(model, workers, entry)
        )
        pairs += self.noise_pairs(workload)
        rng.shuffle(pairs)
        form = rng.choice(argforms.FORMS)
        self.tag(f"params:{form}")
        params = argforms.render(pairs, form, rng)
        if rng.random() < 0.004:
            params.append('--served-model-name "prod model')  # unbalanced quote: shell-splitting fails
            self.tag("unbalanced_quote")
        if rng.random() < 0.03 and params:
            params = self.repeated_flag(params)
        return params

    def world_size(self, model: Json, workers: list[Json]) -> int:
        """The GPU count a user would ask for: a manual selection's, or a node's, or a small power of two."""
        rng = self.rng
        selector = model.get("gpu_selector")
        if selector:
            count = selector.get("gpus_per_replica") or len(selector["gpu_ids"])
            if rng.random() < 0.12:
                self.tag("world_size_mismatch")
                if rng.random() < 0.5:
                    model["env"] = dict(model.get("env") or {}, GPUSTACK_SKIP_GPU_COUNT_CHECK="1")
                    self.tag("skip_gpu_count_check")
                return count * 2 if count < 8 else count // 2
            return count
        sizes = [len(w["status"]["gpu_devices"]) for w in workers if w["status"]["gpu_devices"]]
        return rng.choice([*sizes, 1, 2, 4, 8])

    def llm_pairs(self, model: Json, workers: list[Json], entry: ModelEntry) -> list[argforms.Pair]:
        rng = self.rng
        pairs: list[argforms.Pair] = []
        if rng.random() < 0.5 or (model.get("gpu_selector") and rng.random() < 0.6):
            pairs += self.parallel_pairs(model, workers)
        pairs += self.fraction_pairs()
        pairs += self.feature_pairs(entry)
        return pairs

    def parallel_pairs(self, model: Json, workers: list[Json]) -> list[argforms.Pair]:
        rng = self.rng
        size = self.world_size(model, workers)
        tp_flag = "--tp-size" if rng.random() < 0.85 else "--tensor-parallel-size"
        shape = _weighted(
            rng,
            {
                "tp": 68,
                "tp_pp": 8,
                "tp_dp": 6,
                "nnodes": 6,
                "dp_nnodes": 2,
                "odd_tp": 6,
                "tp_zero": 0.6,
                "not_int": 3.4,
            },
        )
        self.tag(f"parallel:{shape}")
        if shape == "dp_nnodes":  # multi-node data parallelism needs dp attention
            pairs = [(tp_flag, str(size)), ("--dp-size", "2"), ("--nnodes", "2")]
            return pairs + ([("--enable-dp-attention", None)] if rng.random() < 0.5 else [])
        if shape == "tp_pp" and size >= 2:
            return [(tp_flag, str(size // 2)), ("--pp-size", "2")]
        if shape == "tp_dp" and size >= 2:
            pairs = [(tp_flag, str(size // 2)), ("--dp-size", "2")]
            return pairs + ([("--enable-dp-attention", None)] if rng.random() < 0.5 else [])
        if shape == "nnodes":
            nnodes = rng.choice(("2", "2", "3", "two"))
            return [(tp_flag, str(size)), ("--nnodes", nnodes), ("--node-rank", "0")]
        if shape == "odd_tp":
            return [(tp_flag, rng.choice(("3", "6", "12", "16")))]
        if shape == "tp_zero":
            self.tag("tp_size_zero")
            return [(tp_flag, "0")]
        if shape == "not_int":
            return [(tp_flag, rng.choice(("auto", "2.0", "two", "")))]
        return [(tp_flag, str(size))]

    def fraction_pairs(self) -> list[argforms.Pair]:
        rng = self.rng
        pairs: list[argforms.Pair] = []
        if rng.random() < 0.15:
            value = rng.choice(("0.7", "0.75", "0.8", "0.85", "0.88", "0.9", "0.92", ".85", "auto"))
            if rng.random() < 0.04:
                value = rng.choice(("0", "0.0"))
                self.tag("mem_fraction_static_zero")
            pairs.append(("--mem-fraction-static", value))
            self.tag("mem_fraction_static")
        if rng.random() < 0.08:
            pairs.append(("--chunked-prefill-size", rng.choice(("2048", "4096", "8192", "16384", "-1"))))
            self.tag("chunked_prefill_size")
        if rng.random() < 0.08:
            pairs.append(("--cuda-graph-max-bs", rng.choice(("8", "16", "32", "64", "160", "256", "512"))))
            self.tag("cuda_graph_max_bs")
        return pairs

    def feature_pairs(self, entry: ModelEntry) -> list[argforms.Pair]:
        rng = self.rng
        pairs: list[argforms.Pair] = []
        if rng.random() < 0.06:
            algorithm = rng.choice(("EAGLE", "EAGLE3", "NGRAM", "STANDALONE"))
            pairs += [
                ("--speculative-algorithm", algorithm),
                ("--speculative-num-steps", "3"),
                ("--speculative-eagle-topk", "1"),
                ("--speculative-num-draft-tokens", "4"),
            ]
            self.tag("speculative")
        if rng.random() < 0.04:
            pairs.append(
                ("--enable-mixed-chunk", None if rng.random() < 0.7 else rng.choice(("true", "false")))
            )
            self.tag("mixed_chunk")
        if rng.random() < 0.03:
            pairs += [("--enable-piecewise-cuda-graph", None), ("--piecewise-cuda-graph-max-tokens", "4096")]
            self.tag("piecewise_cuda_graph")
        if entry.config and "vision_config" in entry.config and rng.random() < 0.15:
            pairs.append(("--language-only", None))
            self.tag("language_only")
        if rng.random() < 0.03:
            pairs.append(("--enable-dp-attention", rng.choice((None, "false"))))
            self.tag("dp_attention")
        return pairs

    def diffusion_pairs(self, model: Json) -> list[argforms.Pair]:
        rng = self.rng
        pairs: list[argforms.Pair] = []
        if rng.random() < 0.1:
            pairs.append(("--num-gpus", rng.choice(("1", "2", "4"))))
            self.tag("diffusion_num_gpus")
        if rng.random() < 0.12:
            pairs.append(("--tp-size", rng.choice(("1", "2"))))
            self.tag("diffusion_tp")
        if rng.random() < 0.2:
            pairs.append(("--performance-mode", rng.choice(("auto", "speed", "memory"))))
        if rng.random() < 0.1:
            pairs.append(("--dit-cpu-offload", rng.choice(("true", "false"))))
        return pairs

    def noise_pairs(self, workload: str) -> list[argforms.Pair]:
        """Flags a scheduler must read past: values, JSON, negative numbers."""
        rng = self.rng
        pool: list[argforms.Pair] = [
            ("--trust-remote-code", None),
            ("--context-length", rng.choice(("8192", "32768", "131072"))),
            ("--served-model-name", "prod-model"),
            ("--reasoning-parser", "qwen3"),
            ("--tool-call-parser", "qwen25"),
            ("--kv-cache-dtype", "fp8_e5m2"),
            ("--enable-metrics", None),
            ("--log-level", "warning"),
            ("--max-running-requests", "-1"),
            ("--random-seed", "-42"),
            ("--json-model-override-args", '{"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}'),
            ("--attention-backend", "fa3"),
            ("--schedule-conservativeness", "-0.5"),
        ]
        if workload == "diffusion":
            pool = [*pool[:2], ("--enable-torch-compile", None)]
        count = _weighted(rng, {0: 35, 1: 30, 2: 20, 3: 15})
        if count:
            self.tag("noise_params")
        return rng.sample(pool, min(count, len(pool)))

    def repeated_flag(self, params: list[str]) -> list[str]:
        """A bare flag left before its valued repetition (``["--tp-size", "--tp-size=2"]``)."""
        self.tag("repeated_flag")
        return ["--tp-size", f"--tp-size={self.rng.choice((1, 2, 4))}", *params]
