"""Reduce a differing request to a small one that still differs the same way.

Greedy delta debugging over the request's parts: drop workers (halves first,
then one at a time), instances, subordinate workers, GPUs, backend
parameters, labels, selector entries and optional model and worker fields,
and replace the config with its required keys, keeping each step only while
``keep(candidate)`` says the same difference persists. Repeats until no step
applies or the evaluation budget is spent.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

Json = dict[str, Any]
Step = Callable[[Json], Iterator[Json]]

#: Model fields that may go (the model stays valid without them).
OPTIONAL_MODEL_FIELDS = (
    "description",
    "meta",
    "restart_on_error",
    "backend_version",
    "lora_list",
    "env",
    "extended_kv_cache",
    "worker_selector",
    "gpu_selector",
    "replicas",
    "distributed_inference_across_workers",
    "model_scope_model_id",
    "weight_bytes",
)
OPTIONAL_WORKER_FIELDS = ("hostname", "port", "state_message", "unreachable", "ip", "labels")
OPTIONAL_GPU_FIELDS = (
    "uuid",
    "device_index",
    "device_chip_index",
    "arch_family",
    "compute_capability",
    "core",
    "temperature",
)
#: config.json keys GPUStack's parameters and the fraction calculator read.
CONFIG_KEYS = (
    "architectures",
    "model_type",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "num_hidden_layers",
    "vocab_size",
    "max_position_embeddings",
    "torch_dtype",
    "head_dim",
    "text_config",
    "vision_config",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
)


def _drop_list_items(items: list[Any]) -> Iterator[list[Any]]:
    """Halves, then quarters, ..., then single items removed."""
    size = max(1, len(items) // 2)
    while size >= 1:
        for start in range(0, len(items), size):
            yield items[:start] + items[start + size :]
        size //= 2


def _list_steps(request: Json, path: tuple[Any, ...]) -> Iterator[Json]:
    parent = request
    for key in path[:-1]:
        parent = parent[key]
    items = parent.get(path[-1]) if isinstance(parent, dict) else None
    if not isinstance(items, list) or not items:
        return
    for smaller in _drop_list_items(items):
        out = copy.deepcopy(request)
        target = out
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = smaller
        yield out


def _workers(request: Json) -> Iterator[Json]:
    yield from _list_steps(request, ("workers",))


def _instances(request: Json) -> Iterator[Json]:
    yield from _list_steps(request, ("model_instances",))
    for i, instance in enumerate(request.get("model_instances") or []):
        if (instance.get("distributed_servers") or {}).get("subordinate_workers"):
            yield from _list_steps(
                request, ("model_instances", i, "distributed_servers", "subordinate_workers")
            )


def _selected_gpus_kept(request: Json) -> bool:
    """Every manually selected GPU of a present worker still exists (dropping one would change the case)."""
    ids = set((request["model"].get("gpu_selector") or {}).get("gpu_ids") or [])
    for worker in request.get("workers") or []:
        devices = (worker.get("status") or {}).get("gpu_devices") or []
        have = {f"{worker.get('name')}:{g.get('type')}:{g.get('index')}" for g in devices}
        wanted = {i for i in ids if i.split(":")[0] == worker.get("name")}
        if not wanted <= have:
            return False
    return True


def _gpus(request: Json) -> Iterator[Json]:
    consistent = _selected_gpus_kept(request)
    for i, worker in enumerate(request.get("workers") or []):
        if len((worker.get("status") or {}).get("gpu_devices") or []) > 1:
            for smaller in _list_steps(request, ("workers", i, "status", "gpu_devices")):
                if not consistent or _selected_gpus_kept(smaller):
                    yield smaller


def _params(request: Json) -> Iterator[Json]:
    yield from _list_steps(request, ("model", "backend_parameters"))
    if (request["model"].get("gpu_selector") or {}).get("gpu_ids"):
        yield from _list_steps(request, ("model", "gpu_selector", "gpu_ids"))


def _without(mapping: Json, key: str) -> Json:
    return {k: v for k, v in mapping.items() if k != key}


def _model_fields(request: Json, optional: tuple[str, ...] = OPTIONAL_MODEL_FIELDS) -> Iterator[Json]:
    model = request["model"]
    for key in optional:
        if key in model:
            yield dict(request, model=_without(model, key))
    for key in ("worker_selector", "env"):
        for inner in model.get(key) or {}:
            yield dict(request, model=dict(model, **{key: _without(model[key], inner)}))
    config = model.get("hf_config")
    if isinstance(config, dict) and set(config) - set(CONFIG_KEYS):
        yield dict(
            request, model=dict(model, hf_config={k: v for k, v in config.items() if k in CONFIG_KEYS})
        )


def _worker_fields(request: Json) -> Iterator[Json]:
    workers = request.get("workers") or []
    for key in OPTIONAL_WORKER_FIELDS:
        if any(key in w for w in workers):
            yield dict(request, workers=[_without(w, key) for w in workers])
    for key in OPTIONAL_GPU_FIELDS:
        stripped = [_strip_gpu_field(w, key) for w in workers]
        if stripped != workers:
            yield dict(request, workers=stripped)


def _strip_gpu_field(worker: Json, key: str) -> Json:
    status = worker.get("status") or {}
    devices = status.get("gpu_devices")
    if not devices:
        return worker
    return dict(worker, status=dict(status, gpu_devices=[_without(g, key) for g in devices]))


STEPS: tuple[Step, ...] = (_workers, _instances, _gpus, _params, _model_fields, _worker_fields)


def shrink(
    request: Json, keep: Callable[[Json], bool], budget: int = 600, keep_model_fields: tuple[str, ...] = ()
) -> Json:
    """The smallest request found from ``request`` for which ``keep`` still holds.

    ``keep(request)`` must be true on entry; it is called at most ``budget`` times.
    ``keep_model_fields`` are model fields never dropped (e.g. ``weight_bytes`` for realism).
    """
    optional = tuple(f for f in OPTIONAL_MODEL_FIELDS if f not in keep_model_fields)
    steps = [step if step is not _model_fields else (lambda r: _model_fields(r, optional)) for step in STEPS]
    current = copy.deepcopy(request)
    calls = 0
    progress = True
    while progress and calls < budget:
        progress = False
        for step in steps:
            for candidate in step(current):
                if calls >= budget:
                    return current
                calls += 1
                if keep(candidate):
                    current = candidate
                    progress = True
                    break
    return current
