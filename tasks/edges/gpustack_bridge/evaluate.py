"""What GPUStack's model evaluation would have set (``scheduler.py: _evaluate``): the model
categories, and a manual selection's ``gpu_selector.gpus_per_replica``.

GPUStack evaluates a model before it places its first instance and fills ``categories``
when they are empty; with its scheduler switched off nobody does, so the bridge does it
from what it can read locally (it never reaches a model hub): a ``local_path`` folder
inside ``model_roots``. The rule (``evaluate_pretrained_config``, ``set_model_categories``):

1. categories already set: unchanged;
2. the folder holds a diffusers ``model_index.json`` (with ``_diffusers_version``): ``image``;
3. else the first architecture of ``config.json`` found in GPUStack's registry decides
   (``detect_model_type``: embedding, reranker, speech-to-text, text-to-speech or LLM, checked
   in that order per architecture); unknown architectures are ``llm``;
4. a folder or config that cannot be read: unchanged (GPUStack logs the failure and places
   the model anyway).

The architecture lists are GPUStack's, carried as data in ``configs/gpustack_model_types.json``.

``gpus_per_replica`` (``set_model_gpus_per_replica``) is the core's
:func:`scheduler_core.evaluated_gpus_per_replica`. :func:`evaluation` gives both as the
fields to change.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from typing import Any

from pydantic import ValidationError

from scheduler_core import ModelSpec, evaluated_gpus_per_replica
from tasks.base.settings import config_dir
from tasks.intake.requests import local_path_problem

#: Largest config.json / model_index.json read (a real one is a few KB).
MAX_CONFIG_BYTES = 1 << 20
#: Category lists in the order ``detect_model_type`` checks them.
ORDER = ("embedding", "reranker", "speech_to_text", "text_to_speech", "llm")


@lru_cache(maxsize=1)
def _registry() -> dict[str, frozenset[str]]:
    document = json.loads((config_dir() / "gpustack_model_types.json").read_text(encoding="utf-8"))
    return {name: frozenset(document[name]) for name in ORDER}


def detect_category(architectures: list[Any]) -> str:
    """``model_registry.py: detect_model_type``, with unknown mapped to ``llm`` as GPUStack does."""
    registry = _registry()
    for architecture in architectures:
        for category in ORDER:
            if architecture in registry[category]:
                return category
    return "llm"


def _read_json(folder: str, name: str) -> Any:
    path = os.path.join(folder, name)
    try:
        with open(path, "rb") as handle:
            if not os.path.isfile(path):
                return None
            text = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError:
        return None
    if len(text) > MAX_CONFIG_BYTES:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def categories_for(model: dict[str, Any], roots: tuple[str, ...]) -> list[str] | None:
    """The categories to write to ``model`` (a Contract 1 model dict), or None to leave them."""
    if model.get("categories"):
        return None
    folder = model.get("local_path")
    if not isinstance(folder, str) or local_path_problem(ModelSpec.model_validate(model), roots) is not None:
        return None
    index = _read_json(folder, "model_index.json")
    if isinstance(index, dict) and "_diffusers_version" in index:
        return ["image"]
    config = _read_json(folder, "config.json")
    if not isinstance(config, dict):
        return None
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or not architectures:
        # GPUStack's evaluation fails on a config without architectures unless a backend
        # version is set (then the architecture is unknown: LLM)
        return ["llm"] if model.get("backend_version") else None
    return [detect_category(architectures)]


def evaluation(model: dict[str, Any], roots: tuple[str, ...]) -> dict[str, Any]:
    """The fields GPUStack's evaluation would change on ``model`` (a Contract 1 model dict):
    ``categories`` and ``gpu_selector`` (its ``gpus_per_replica`` filled), each only when it
    would change; empty when nothing would (or the row is not a valid model: the decision
    rejects it, naming the field)."""
    changes: dict[str, Any] = {}
    categories = categories_for(model, roots)
    if categories is not None:
        changes["categories"] = categories
    try:
        per_replica = evaluated_gpus_per_replica(ModelSpec.model_validate(model))
    except ValidationError:
        per_replica = None
    if per_replica is not None:
        changes["gpu_selector"] = {**model["gpu_selector"], "gpus_per_replica": per_replica}
    return changes
