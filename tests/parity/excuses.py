"""The deliberate differences (README, "Deliberate differences"), recognised in a request.

A difference is excused only when the request exhibits the input that the
README's row is about *and* the two results show that row's signature (for
example: GPUStack crashed with ``ZeroDivisionError`` and the request has a
zero-size GPU). Anything else that differs, GPUStack crashing included, is a
defect. Backend parameters are read with a tokeniser of this module's own
that follows GPUStack's reading (``gpustack/utils/command.py:
flatten_to_argv`` / ``find_parameter``), independently of ``scheduler_core``.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator
from typing import Any

Json = dict[str, Any]

#: Name -> the README row it stands for (upstream behaviour → ours).
DELIBERATE: dict[str, str] = {
    "mixed_vendor_worker": "allocatable keyed by GPU index / shallow worker copy → keyed by (type, index)",
    "binpack_index_collision": "binpack reads allocatable without a GPU type → the candidate's GPU type",
    "zero_size_gpu": "a zero-size GPU raises ZeroDivisionError → the GPU is skipped",
    "system_reserved_null": "system_reserved: null crashes → null reserved counts as 0",
    "argument_error_before_filters": "argument errors surface only after the filters → rejected immediately",
    "tp_size_zero": "--tp-size 0 counts as unset → rejected as bad input",
    "duplicate_gpu_ids": "duplicate gpu_ids count twice → rejected as bad input",
    "mem_fraction_static_zero": "--mem-fraction-static 0 crashes the calculator → rejected as bad input",
    "shared_type_index": "two GPUs may share a (type, index) → rejected as bad input",
    "diffusion_num_gpus": "a diffusion model's --num-gpus is ignored → it sets the GPU count",
    "manual_absent_gpu": "a selected GPU the worker does not report stays in the placement → left out",
}


def _is_key(token: str) -> bool:
    if not token.startswith("-") or len(token) <= 1 or token == "--":
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False


def argv(params: list[str] | None) -> list[str]:
    """The argv an element list stands for: elements whose first word is a flag are shell-split."""
    tokens: list[str] = []
    for entry in params or []:
        text = (entry or "").strip()
        if not text:
            continue
        if _is_key(text.split(None, 1)[0]):
            try:
                tokens += shlex.split(text.replace("\\\n", " ").rstrip("\\"))
            except ValueError:
                tokens.append(text)
        else:
            tokens.append(text)
    return tokens


def _pairs(params: list[str] | None) -> Iterator[tuple[str, str | None]]:
    tokens = argv(params)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not _is_key(token):
            i += 1
        elif "=" in token:
            key, _, value = token.partition("=")
            yield key.lstrip("-"), value
            i += 1
        elif i + 1 < len(tokens) and not _is_key(tokens[i + 1]):
            yield token.lstrip("-"), tokens[i + 1]
            i += 2
        else:
            yield token.lstrip("-"), None
            i += 1


def parameter(params: list[str] | None, names: tuple[str, ...]) -> str | None:
    """The first value given to one of ``names`` (bare occurrences skipped), as GPUStack reads it."""
    return next((value for key, value in _pairs(params) if key in names and value is not None), None)


def has_flag(params: list[str] | None, names: tuple[str, ...]) -> bool:
    return any(key in names for key, _ in _pairs(params))


def _number(text: str | None) -> float | None:
    try:
        return None if text is None else float(text)
    except ValueError:
        return None


# --------------------------------------------------------------------------- what the request exhibits


def _devices(request: Json) -> Iterator[tuple[Json, list[Json]]]:
    for worker in request.get("workers") or []:
        if isinstance(worker, dict):
            yield worker, ((worker.get("status") or {}).get("gpu_devices") or [])


def _selected_types(request: Json) -> dict[str, set[str]]:
    """Worker name -> the GPU types a manual selection names on it."""
    selected: dict[str, set[str]] = {}
    for gpu_id in (_model(request).get("gpu_selector") or {}).get("gpu_ids") or []:
        name, _, index = str(gpu_id).rpartition(":")
        worker_name, _, gpu_type = name.rpartition(":")
        if index.isdigit() and worker_name:
            selected.setdefault(worker_name, set()).add(gpu_type)
    return selected


def _mixed_vendor(request: Json) -> bool:
    """A worker with GPUs of several types that GPUStack's shallow copy corrupts for this request.

    ``group_workers_by_gpu_type`` leaves every mixed worker holding only the GPUs of its last
    type (by first appearance). Under a manual selection only the selected workers are read (the
    GPU-selector filter drops the others), so a selected worker whose selected GPUs are all of its
    last type, in their own order, is read exactly as gpusched reads it: nothing to excuse there.
    """
    selected = _selected_types(request)
    for worker, devices in _devices(request):
        types = list(dict.fromkeys(g.get("type") for g in devices))
        if len(types) < 2:
            continue
        if selected:
            chosen = selected.get(str(worker.get("name")))
            if chosen is None or chosen == {types[-1]}:
                continue
        return True
    return bool(selected) and _copy_reorders(request, selected)


def _copy_reorders(request: Json, selected: dict[str, set[str]]) -> bool:
    """The shallow copy changes the order of the selected workers: GPUStack counts a mixed
    worker's GPUs of its last type only when it sorts workers by GPU count (stable)."""
    rows = [(str(w.get("name")), devices) for w, devices in _devices(request)
            if str(w.get("name")) in selected]

    def last_type_count(devices: list[Json]) -> int:
        types = list(dict.fromkeys(g.get("type") for g in devices))
        return sum(1 for g in devices if types and g.get("type") == types[-1])

    ours = sorted(rows, key=lambda row: len(row[1]), reverse=True)
    theirs = sorted(rows, key=lambda row: last_type_count(row[1]), reverse=True)
    return [name for name, _ in ours] != [name for name, _ in theirs]


def _index_collision(request: Json) -> bool:
    for _, devices in _devices(request):
        types_by_index: dict[Any, set[Any]] = {}
        for g in devices:
            types_by_index.setdefault(g.get("index"), set()).add(g.get("type"))
        if any(len(types) > 1 for types in types_by_index.values()):
            return True
    return False


def _shared_type_index(request: Json) -> bool:
    for _, devices in _devices(request):
        keys = [(g.get("type"), g.get("index")) for g in devices]
        if len(keys) != len(set(keys)):
            return True
    return False


def _zero_size_gpu(request: Json) -> bool:
    return any(not (g.get("memory") or {}).get("total") for _, devices in _devices(request) for g in devices)


def _reserved_null(request: Json) -> bool:
    return any(worker.get("system_reserved") is None for worker, _ in _devices(request))


def _model(request: Json) -> Json:
    model = request.get("model")
    return model if isinstance(model, dict) else {}


def _params(request: Json) -> list[str]:
    params = _model(request).get("backend_parameters")
    return params if isinstance(params, list) else []


def _tp_zero(request: Json) -> bool:
    return _number(parameter(_params(request), ("tp-size", "tensor-parallel-size"))) == 0


def _fraction_zero(request: Json) -> bool:
    return _number(parameter(_params(request), ("mem-fraction-static",))) == 0


def _duplicate_gpu_ids(request: Json) -> bool:
    ids = (_model(request).get("gpu_selector") or {}).get("gpu_ids") or []
    return len(ids) != len(set(ids))


def _diffusion_num_gpus(request: Json) -> bool:
    return "image" in (_model(request).get("categories") or []) and has_flag(_params(request), ("num-gpus",))


def _manual_absent_gpu(request: Json) -> bool:
    """A manual selection names (worker, type, index) that the named worker does not report."""
    ids = (_model(request).get("gpu_selector") or {}).get("gpu_ids") or []
    reported: dict[str, set[tuple[str | None, int | None]]] = {}
    for worker, devices in _devices(request):
        reported[str(worker.get("name"))] = {(d.get("type"), d.get("index")) for d in devices}
    for gpu_id in ids:
        name, _, rest = str(gpu_id).rpartition(":")
        worker_name, _, gpu_type = name.rpartition(":")
        if not rest.isdigit() or worker_name not in reported:
            continue
        if (gpu_type, int(rest)) not in reported[worker_name]:
            return True
    return False


def exhibited(request: Json) -> set[str]:
    """The deliberate-difference inputs present in ``request``."""
    checks: dict[str, Callable[[Json], bool]] = {
        "mixed_vendor_worker": _mixed_vendor,
        "binpack_index_collision": lambda r: (
            _model(r).get("placement_strategy") == "binpack" and _index_collision(r)
        ),
        "zero_size_gpu": _zero_size_gpu,
        "system_reserved_null": _reserved_null,
        "tp_size_zero": _tp_zero,
        "duplicate_gpu_ids": _duplicate_gpu_ids,
        "mem_fraction_static_zero": _fraction_zero,
        "shared_type_index": _shared_type_index,
        "diffusion_num_gpus": _diffusion_num_gpus,
        "manual_absent_gpu": _manual_absent_gpu,
    }
    return {name for name, check in checks.items() if check(request)}


# --------------------------------------------------------------------------- signatures

#: Our rejections that are argument errors GPUStack raises too (after its filters).
_ARGUMENT_FIELDS = ("model.backend_parameters", "model.gpu_selector", "model.hf_config", "model.env")


def _oracle_crashed(theirs: Json, kind: str) -> bool:
    error = theirs.get("error") or {}
    return theirs.get("status") == "error" and error.get("type") == kind


def _filters_left_nothing(theirs: Json) -> bool:
    """GPUStack's selector never ran: no worker passed the filters (or there were none)."""
    return (
        theirs.get("status") == "unschedulable" and "estimate" not in theirs and not theirs.get("candidates")
    )


def _argument_error(ours: Json) -> bool:
    error = ours.get("error") or {}
    return ours.get("status") == "rejected" and str(error.get("field") or "").startswith(_ARGUMENT_FIELDS)


def excuse(request: Json, ours: Json, theirs: Json) -> str | None:
    """The deliberate difference that explains why ``ours`` and ``theirs`` (raw results) differ, if any."""
    present = exhibited(request)
    rejected = ours.get("status") == "rejected"
    signatures: list[tuple[str, bool]] = [
        (
            "system_reserved_null",
            "system_reserved_null" in present and _oracle_crashed(theirs, "AttributeError"),
        ),
        ("zero_size_gpu", "zero_size_gpu" in present and _oracle_crashed(theirs, "ZeroDivisionError")),
        ("tp_size_zero", "tp_size_zero" in present and rejected),
        ("mem_fraction_static_zero", "mem_fraction_static_zero" in present and rejected),
        ("duplicate_gpu_ids", "duplicate_gpu_ids" in present and rejected),
        ("shared_type_index", "shared_type_index" in present and rejected),
        ("argument_error_before_filters", _argument_error(ours) and _filters_left_nothing(theirs)),
        ("binpack_index_collision", "binpack_index_collision" in present),
        ("mixed_vendor_worker", "mixed_vendor_worker" in present),
        ("diffusion_num_gpus", "diffusion_num_gpus" in present),
        ("manual_absent_gpu", "manual_absent_gpu" in present),
    ]
    return next((name for name, matched in signatures if matched), None)


# --------------------------------------------------------------------------- oracle gaps

#: Where the oracle cannot reproduce GPUStack (not a deliberate difference of ours): name -> why.
ORACLE_GAPS: dict[str, str] = {
    "distributed_limit": (
        "GPUStack's one-distributed-instance-per-worker check reads instance.model.backend "
        "(base_candidate_selector.py: _validate_distributed_limit_per_worker); the scheduler loads that "
        "relation (selectinload); the oracle's ModelInstance rows never have it, so it never fires there"
    ),
}


def _hosts_distributed(request: Json, worker_name: str) -> bool:
    """A worker named ``worker_name`` leads or follows a distributed SGLang instance."""
    ids = {
        w.get("id")
        for w in request.get("workers") or []
        if isinstance(w, dict) and w.get("name") == worker_name
    }
    for instance in request.get("model_instances") or []:
        subs = ((instance or {}).get("distributed_servers") or {}).get("subordinate_workers") or []
        if not subs or str(instance.get("backend") or "sglang").lower() != "sglang":
            continue
        if instance.get("worker_id") in ids or any(s.get("worker_id") in ids for s in subs):
            return True
    return False


def _distributed_limit_applies(request: Json) -> bool:
    """Manual selection over several workers, one of them already in a distributed SGLang instance."""
    model = _model(request)
    names = {str(i).split(":")[0] for i in (model.get("gpu_selector") or {}).get("gpu_ids") or []}
    return (
        model.get("backend", "SGLang") is not None
        and len(names) > 1
        and any(_hosts_distributed(request, name) for name in names)
    )


def oracle_gap(request: Json, ours: Json, theirs: Json) -> str | None:
    """The known oracle limitation behind a difference, if any (reported apart, never as parity)."""
    return "distributed_limit" if _distributed_limit_applies(request) else None
