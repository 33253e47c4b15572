"""What a decision produces besides the result: the booking, the notices, the audit summary."""

from __future__ import annotations

import json
from typing import Any

from scheduler_core import CandidateOut, ModelInstance, ModelSpec, ScheduleResult
from tasks.cluster_store import row_json
from tasks.edge import is_pinned, sha256_hex
from tasks.fold import ClusterFold, InstanceMeta, booked_instance_key
from tasks.ledger import encode_amounts, instance_claims, occupied_workers
from tasks.store import Booking
from tasks.streams import dumps

#: Text appended to an overcommitted pick the ledger will not book.
OVERCOMMIT_MESSAGE = (
    "The selected GPUs do not have the memory this placement claims; gpusched never books "
    "past allocatable memory, so the request waits for the selected GPUs to free up."
)


def error_of(result: ScheduleResult) -> dict[str, Any] | None:
    """The result's error as JSON data (None when it has none)."""
    return result.error.model_dump(mode="json") if result.error else None


def overcommit_notice(result: ScheduleResult) -> ScheduleResult:
    """The ``unschedulable`` notice for an overcommitted pick the ledger will not book."""
    return result.model_copy(
        update={
            "status": "unschedulable",
            "selected": None,
            "launch": None,
            "messages": [*result.messages, OVERCOMMIT_MESSAGE],
        }
    )


def candidate_instance(chosen: CandidateOut, **fields: Any) -> ModelInstance:
    """The instance row placing a candidate (its GPUs and claims), with extra row ``fields``."""
    subordinates = [sub.model_dump(mode="json") for sub in chosen.subordinate_workers or ()]
    return ModelInstance.model_validate({
        **fields,
        "worker_id": chosen.worker_id,
        "worker_name": chosen.worker_name,
        "gpu_type": chosen.gpu_type,
        "gpu_indexes": chosen.gpu_indexes,
        "computed_resource_claim": chosen.computed_resource_claim.model_dump(mode="json"),
        "distributed_servers": {"subordinate_workers": subordinates} if subordinates else None,
    })


def booking_for(
    fold: ClusterFold, request_id: str, model: ModelSpec, chosen: CandidateOut
) -> Booking:
    """The instance row, meta, claims and event data a reservation of ``chosen`` books."""
    instance = candidate_instance(
        chosen, name=f"{model.name or 'model'}-{request_id}", model_id=model.id,
        model_name=model.name, backend=model.backend, state="scheduled",
    )
    types = fold.gpu_types() if instance.gpu_type is None else {}
    claims = encode_amounts(instance_claims(instance, types))
    key = booked_instance_key(request_id)
    meta = InstanceMeta(
        "gpusched", (0, 0), request_id=request_id, pinned=is_pinned(model),
        workers=tuple(occupied_workers(instance)),
    ).to_dict()
    meta.pop("v")
    meta.pop("i")
    stored_row = row_json(instance)
    data = dumps(
        {"instance_key": key, "row": json.loads(stored_row), "meta": meta, "claims": claims,
         "request_id": request_id}
    )
    return Booking(key, stored_row, dumps(meta), claims, data)


def outcome_summary(result: ScheduleResult) -> dict[str, Any]:
    """The part of a result a decision event keeps for audits and replay diffs."""
    selected = result.candidates[result.selected] if result.selected is not None else None
    return {
        "status": result.status,
        "selected": result.selected,
        "candidate_count": len(result.candidates),
        "selected_candidate": selected.model_dump(mode="json") if selected else None,
        "launch": result.launch.model_dump(mode="json") if result.launch else None,
        "estimate": result.estimate.model_dump(mode="json") if result.estimate else None,
        "error": error_of(result),
        "messages": list(result.messages),
        "filters": list(result.filter_messages),
        "strategies": [
            {"level": e.level, "action": e.action, "reason": e.reason} for e in result.events
        ],
    }


def result_digest(result: ScheduleResult) -> tuple[str, str]:
    """The result's JSON (field order, as published) and its sha256."""
    text = result.model_dump_json()
    return text, sha256_hex(text)


def inputs_digest(request_digest: str, version: int, chain_digest: str) -> str:
    """Digest of everything a decision depends on (request, cluster version, chain)."""
    return sha256_hex(f"{request_digest}:{version}:{chain_digest}")
