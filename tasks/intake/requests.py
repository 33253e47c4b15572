"""Validating a scheduling request at the edge: its id, its canonical form, its rejection.

Invalid input never reaches a worker as an exception: it becomes the core's
``rejected`` result, naming the field. A valid request is stored canonically
(sorted-key JSON, without inline workers/instances: the service holds the
cluster) under its idempotency key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from scheduler_core import ModelSpec, ScheduleRequest, ScheduleResult, canonical_json, schedule
from tasks.audit.digests import sha256_hex

#: Request fields the service ignores: it holds the cluster state itself.
INLINE_CLUSTER_FIELDS = ("workers", "model_instances")
#: Longest request id accepted as given (Contract 1); longer ones are replaced by a digest.
MAX_REQUEST_ID = 200


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
    """The request's idempotency key: the given id, else ``req-`` + a content digest.

    The service's copy of the core's request-id rule (``schedule()`` names an
    invalid request's result the same way); the only place the service
    derives a request id.
    """
    if isinstance(raw, Mapping):
        given = raw.get("request_id")
        if isinstance(given, str) and 0 < len(given) <= MAX_REQUEST_ID:
            return given
    return "req-" + hashlib.sha256(canonical_json(raw).encode()).hexdigest()[:24]


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
