"""What a reservation books for a chosen candidate: the instance row, its meta and its claims."""

from __future__ import annotations

import json
from typing import Any

from scheduler_core import CandidateOut, ModelInstance, ModelSpec
from tasks.base.events import dumps
from tasks.base.rows import InstanceMeta, booked_instance_key, row_json
from tasks.intake.requests import is_pinned
from tasks.state.cluster_store import Booking
from tasks.state.fold import ClusterFold
from tasks.state.ledger import encode_amounts, instance_claims, occupied_workers


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
    held = instance_claims(instance, types)
    claims = encode_amounts(held)
    key = booked_instance_key(request_id)
    meta = InstanceMeta(
        "gpusched", (0, 0), request_id=request_id, pinned=is_pinned(model),
        workers=tuple(occupied_workers(instance)),
    ).to_dict_without_order()
    stored_row = row_json(instance)
    data = dumps(
        {"instance_key": key, "row": json.loads(stored_row), "meta": meta,
         "claims": dict(sorted(held.items())), "request_id": request_id}
    )
    return Booking(key, stored_row, dumps(meta), claims, data)
