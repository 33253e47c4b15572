"""What gpusched and GPUStack must agree on, and where they differ.

``comparable`` reduces a result (ours, or the oracle's, which uses the same
shape) to the decision: status, candidates (worker, GPU type and indexes,
per-GPU VRAM claims, RAM, ``vram_utilization``, overcommit, score rounded to
6 places, subordinate workers with the same fields), ``selected``,
``messages``, ``filter_messages``, ``state_message`` and the error text (and
field). ``differences`` names the parts that differ, as stable paths
(``candidates[].vram_utilization``, ``messages``, ``error.message``, ...), so
differences can be grouped by what differs.

One normalisation: GPUStack's GPU-selector filter lists missing workers by
joining a ``set`` (``gpustack/policies/worker_filters/gpu_matching_filter.py:
GPUMatchingFilter.filter``), so their order follows the interpreter's string
hash seed, which GPUStack does not pin; the names are compared sorted.
"""

from __future__ import annotations

import re
from typing import Any

Json = dict[str, Any]

_MISSING_WORKERS = re.compile(r"Missing workers: ([^\n]*?)\.(?=\n|$)")


def _sorted_missing(text: str) -> str:
    return _MISSING_WORKERS.sub(
        lambda m: "Missing workers: " + ", ".join(sorted(m.group(1).split(", "))) + ".", text
    )


def _text(value: Any) -> Any:
    return _sorted_missing(value) if isinstance(value, str) else value


def _claim(claim: Json | None) -> Json:
    claim = claim or {}
    vram = claim.get("vram")
    return {
        "vram": None if vram is None else {str(k): v for k, v in vram.items()},
        "ram": claim.get("ram"),
        "vram_utilization": claim.get("vram_utilization"),
    }


def _subordinate(sub: Json) -> Json:
    return {
        "worker_id": sub.get("worker_id"),
        "gpu_type": sub.get("gpu_type"),
        "gpu_indexes": list(sub.get("gpu_indexes") or []),
        **_claim(sub.get("computed_resource_claim")),
    }


def _candidate(c: Json) -> Json:
    score = c.get("score")
    return {
        "worker_id": c.get("worker_id"),
        "gpu_type": c.get("gpu_type"),
        "gpu_indexes": c.get("gpu_indexes"),
        **_claim(c.get("computed_resource_claim")),
        "overcommit": bool(c.get("overcommit")),
        "score": None if score is None else round(score, 6),
        "subordinates": [_subordinate(s) for s in c.get("subordinate_workers") or []],
    }


def comparable(result: Json) -> Json:
    """The parts of a Contract-1 result (ours or the oracle's) both sides must agree on."""
    error = result.get("error")
    return {
        "status": result.get("status"),
        "candidates": [_candidate(c) for c in result.get("candidates") or []],
        "selected": result.get("selected"),
        "messages": [_text(m) for m in result.get("messages") or []],
        "filter_messages": [_text(m) for m in result.get("filter_messages") or []],
        "state_message": _text(result.get("state_message")),
        "error": None if not error else {"message": error.get("message"), "field": error.get("field")},
    }


def _candidate_paths(ours: list[Json], theirs: list[Json]) -> set[str]:
    if len(ours) != len(theirs):
        return {"candidates.count"}
    paths: set[str] = set()
    for mine, other in zip(ours, theirs, strict=True):
        for key in mine:
            if key == "subordinates":
                paths |= {
                    f"candidates[].subordinates{p.removeprefix('candidates')}"
                    for p in _candidate_paths(mine[key], other[key])
                }
            elif mine[key] != other[key]:
                paths.add(f"candidates[].{key}")
    return paths


def _error_paths(ours: Json | None, theirs: Json | None) -> set[str]:
    if ours is None or theirs is None:
        return set()  # a missing error shows as a status difference
    paths = set()
    if ours.get("message") != theirs.get("message"):
        paths.add("error.message")
    if ours.get("field") and theirs.get("field") and ours["field"] != theirs["field"]:
        paths.add("error.field")
    return paths


def differences(ours: Json, theirs: Json) -> list[str]:
    """Sorted paths of the comparable fields that differ (empty when the decisions agree)."""
    paths: set[str] = set()
    for key in ("status", "selected", "messages", "filter_messages", "state_message"):
        if ours[key] != theirs[key]:
            paths.add(key)
    paths |= _candidate_paths(ours["candidates"], theirs["candidates"])
    paths |= _error_paths(ours["error"], theirs["error"])
    return sorted(paths)
