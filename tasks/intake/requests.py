"""Validating a scheduling request at the edge: its id, its canonical form, its rejection.

Invalid input never reaches a worker as an exception: it becomes a
``rejected`` result, naming the field — the core's, or the service's own for
what only the service bounds (:func:`service_problem`): nesting and Unicode
anywhere in the request, the stored size (``max_request_bytes``), the
request id's alphabet (:mod:`tasks.intake.names`) and local model folders
outside the configured ``model_roots``. A valid request is stored canonically
(sorted-key JSON, without inline workers/instances: the service holds the
cluster) under its idempotency key; a rejected one is stored as a short stub
when the request itself is what must not be stored (too large, too deep).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler_core import (
    UNHASHABLE_REQUEST_ID,
    ErrorOut,
    ModelSpec,
    RequestError,
    ScheduleResult,
    canonical_json,
    first_problem,
    parse_request,
    request_id_for,
)
from tasks.base.digests import sha256_hex
from tasks.intake.limits import (
    MAX_JSON_DEPTH,
    IntakeLimits,
    InvalidField,
    check_document,
    check_size,
    nesting_path,
)
from tasks.intake.names import REQUEST_ID, check_name

#: Request fields the service ignores: it holds the cluster state itself.
INLINE_CLUSTER_FIELDS = ("workers", "model_instances")
#: ``error.code`` of the service's own rejections (the core's codes otherwise).
INVALID_REQUEST = "invalid_request"


@dataclass(frozen=True, slots=True)
class Normalized:
    """A request as the service stores it, validated at the edge.

    Attributes:
        request_id: the given id, or ``req-<digest>`` of the whole input.
        request_json: canonical JSON without inline workers/instances.
        digest: sha256 of ``request_json``.
        rejection: the ``rejected`` result when the input is invalid, else None.
        pinned: the model selects GPUs manually.
    """

    request_id: str
    request_json: str
    digest: str
    rejection: ScheduleResult | None
    pinned: bool


def request_id_of(raw: Any) -> str:
    """The request's idempotency key: the core's rule (:func:`scheduler_core.request_id_for`):
    the given id, else ``req-`` + a content digest, at any depth (so each too-deep request is
    refused under its own id); the core's fixed id only for a value that contains itself,
    which no JSON document is (``schedule()`` rejects it under that id)."""
    try:
        return request_id_for(raw)
    except ValueError:
        return UNHASHABLE_REQUEST_ID


def normalize(raw: Any, limits: IntakeLimits | None = None) -> Normalized:
    """Validate a raw request at the edge; never raises.

    Args:
        raw: the request as received.
        limits: the deployment's bounds (defaults: :class:`IntakeLimits`).
    """
    limits = limits or IntakeLimits()
    request_id = request_id_of(raw)
    if not isinstance(raw, Mapping):
        return _rejected_non_object(raw, request_id)
    stripped = {k: v for k, v in raw.items() if k not in INLINE_CLUSTER_FIELDS}
    stripped["request_id"] = request_id
    deep = deep_field(stripped)
    if deep is not None:
        return _refused(request_id, deep, f"nests more than {MAX_JSON_DEPTH} levels deep")
    text = canonical_json(stripped)
    try:
        check_size(text, limits.max_request_bytes, field="request", setting="max_request_bytes")
    except InvalidField as error:
        return _refused(request_id, error.field, error.message)
    given = raw.get("request_id")
    if given is not None and given != request_id:  # one the core refuses: rejected under the derived id
        rejection = _invalid_id(stripped, given, request_id)
        return Normalized(request_id, text, sha256_hex(text), rejection, False)
    try:
        check_document(stripped)
        if isinstance(given, str) and given == request_id:
            check_name(request_id, REQUEST_ID, "request_id")
    except InvalidField as error:
        rejection = service_rejection(request_id, error.field, error.message)
        return Normalized(request_id, text, sha256_hex(text), rejection, False)
    try:
        parsed = parse_request(stripped)
    except RequestError as error:
        rejection = service_rejection(request_id, error.field or "request", error.message)
        return Normalized(request_id, text, sha256_hex(text), rejection, False)
    problem = local_path_problem(parsed.model, limits.model_roots) if limits.check_local_paths else None
    if problem is not None:
        rejection = service_rejection(request_id, problem.field, problem.message)
        return Normalized(request_id, text, sha256_hex(text), rejection, False)
    return Normalized(request_id, text, sha256_hex(text), None, is_pinned(parsed.model))


def _invalid_id(stripped: dict[str, Any], given: Any, request_id: str) -> ScheduleResult:
    """The core's rejection of a ``request_id`` it does not take as the id (not a string,
    empty, longer than 200 characters, not valid Unicode), under the id derived instead."""
    try:
        parse_request({**stripped, "request_id": given})
    except RequestError as error:
        return service_rejection(request_id, error.field or "request", error.message)
    problem = first_problem(given, root="request_id") if isinstance(given, str) else None
    if problem is not None:
        return service_rejection(request_id, problem.field, problem.message)
    return service_rejection(request_id, "request_id", "must be 1 to 200 characters of valid Unicode")


def _rejected_non_object(raw: Any, request_id: str) -> Normalized:
    """A request that is not a JSON object: the core's rejection, stored whole unless too deep."""
    if nesting_path(raw) is not None:
        return _refused(request_id, "request", f"nests more than {MAX_JSON_DEPTH} levels deep")
    try:
        parse_request(raw)
        rejection = service_rejection(request_id, "request", "must be a JSON object")
    except RequestError as error:
        rejection = service_rejection(request_id, error.field or "request", error.message)
    text = canonical_json({"request_id": request_id, "invalid": raw})
    return Normalized(request_id, text, sha256_hex(text), rejection, False)


def _refused(request_id: str, field: str, message: str) -> Normalized:
    """A request the service refuses to store: its rejection and a short stub in its place."""
    text = canonical_json({"request_id": request_id, "invalid": f"{field}: {message}"})
    rejection = service_rejection(request_id, field, message)
    return Normalized(request_id, text, sha256_hex(text), rejection, False)


def deep_field(request: Mapping[str, Any]) -> str | None:
    """The field of a request that nests more than :data:`MAX_JSON_DEPTH` levels (the whole
    document counted), None if none: the core's checker and field rule
    (:func:`scheduler_core.first_problem`, :func:`scheduler_core.request_field`: the
    top-level field, or the model's field, ``model.hf_config``; never split from a dotted
    path, a key may hold dots; an empty key as :data:`scheduler_core.EMPTY_KEY`; rendered).
    """
    problem = first_problem(request, MAX_JSON_DEPTH, unicode=False, request=True)
    return None if problem is None else problem.field


def service_rejection(request_id: str, field: str, message: str) -> ScheduleResult:
    """A ``rejected`` result for what the service refuses (``error.code = invalid_request``)."""
    return ScheduleResult(
        request_id=request_id,
        status="rejected",
        error=ErrorOut(code=INVALID_REQUEST, message=message, field=field),
    )


def names_local_paths(model: ModelSpec) -> bool:
    """Whether the model names a local folder (its own or a LoRA's)."""
    return model.local_path is not None or any(e.local_path is not None for e in model.lora_list or ())


def local_path_problem(model: ModelSpec, roots: tuple[str, ...]) -> InvalidField | None:
    """A ``local_path`` (the model's or a LoRA's) the service must not read, or None.

    Only paths under one of ``roots`` may be read: absolute, without ``..`` (a
    symlink's parent would escape lexical checks), inside a root after
    normalisation. The message is the same whether the path exists, is a file or
    is missing, so a submitter learns nothing about the worker's disk.
    """
    named = [("model.local_path", model.local_path)]
    named += [(f"model.lora_list.{i}.local_path", e.local_path) for i, e in enumerate(model.lora_list or ())]
    for field, path in named:
        if path is not None and not _under_roots(path, roots):
            if not roots:
                return InvalidField(field, "this service reads no local model folders (model_roots is empty)")
            return InvalidField(field, "is not inside a model root of this service (model_roots)")
    return None


def _under_roots(path: str, roots: tuple[str, ...]) -> bool:
    if not os.path.isabs(path) or ".." in path.split("/"):
        return False
    normal = os.path.normpath(path)
    return any(normal == root or normal.startswith(root.rstrip("/") + "/") for root in roots)


def with_request_id(result: ScheduleResult, request_id: str) -> ScheduleResult:
    """The result, carrying ``request_id`` (the core derives its own for invalid input)."""
    return result if result.request_id == request_id else result.model_copy(
        update={"request_id": request_id}
    )


def is_pinned(model: ModelSpec) -> bool:
    """The model selects its GPUs manually (``gpu_selector.gpu_ids``)."""
    return bool(model.gpu_selector and model.gpu_selector.gpu_ids)


def error_of(result: ScheduleResult) -> dict[str, Any] | None:
    """The result's error as JSON data (None when it has none)."""
    return result.error.model_dump(mode="json") if result.error else None
