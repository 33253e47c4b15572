"""Validating a scheduling request at the edge: its id, its canonical form, its rejection.

Invalid input never reaches a worker as an exception: it becomes the core's
``rejected`` result, naming the field. A valid request is stored canonically
(sorted-key JSON, without inline workers/instances: the service holds the
cluster) under its idempotency key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from scheduler_core import (
    UNHASHABLE_REQUEST_ID,
    ModelSpec,
    ScheduleRequest,
    ScheduleResult,
    canonical_json,
    request_id_for,
    schedule,
)
from tasks.audit.digests import sha256_hex

#: Request fields the service ignores: it holds the cluster state itself.
INLINE_CLUSTER_FIELDS = ("workers", "model_instances")


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
    the given id, else ``req-`` + a content digest; the core's fixed id for a request that
    has none and nests too deeply to be hashed (``schedule()`` rejects it under that id)."""
    try:
        return request_id_for(raw)
    except ValueError:
        return UNHASHABLE_REQUEST_ID


def normalize(raw: Any) -> Normalized:
    """Validate a raw request at the edge; never raises."""
    request_id = request_id_of(raw)
    if not isinstance(raw, Mapping):
        rejection = schedule(raw)
        text = canonical_json({"request_id": request_id, "invalid": raw})
        rejected = with_request_id(rejection, request_id)
        return Normalized(request_id, text, sha256_hex(text), rejected, False)
    stripped = {k: v for k, v in raw.items() if k not in INLINE_CLUSTER_FIELDS}
    stripped["request_id"] = request_id
    text = canonical_json(stripped)
    try:
        parsed = ScheduleRequest.model_validate(stripped)
    except ValidationError:
        rejection = with_request_id(schedule(stripped), request_id)
        return Normalized(request_id, text, sha256_hex(text), rejection, False)
    return Normalized(request_id, text, sha256_hex(text), None, is_pinned(parsed.model))


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
