"""One request record driven through the Lua scripts directly (the state tests on fakeredis).

Every helper acts on request ``r1`` unless told otherwise, with result digest
``d``: the record's decision is what the later scripts check against.
"""

from __future__ import annotations

import json
from typing import Any

from tasks.state.cluster_store import Booking, Reserved
from tasks.state.ledger import encode_amounts
from tasks.state.records import Accepted
from tasks.testing import Harness


def accept(h: Harness, rid: str = "r1", **kwargs: Any) -> Accepted:
    """Accept a minimal request ``{"request_id": rid}`` (digest ``digest``)."""
    return h.rt.records.accept(rid, json.dumps({"request_id": rid}), "digest", **kwargs)


def event_types(h: Harness) -> list[str]:
    """The type of every audit event, in order."""
    return [event.type for event in h.events()]


def decided(h: Harness, rid: str = "r1") -> None:
    """Accept ``rid``, begin attempt (0, 0) and record a ``scheduled`` decision (digest ``d``)."""
    accept(h, rid)
    h.rt.partition.call(h.rt.records.begin_call(rid, 0, 0, "t"))
    h.rt.partition.call(h.rt.records.record_decision_call(rid, 0, 0, 0, '{"status":"scheduled"}', "d", "{}"))


def booking(claims: dict[str, int], key: str = "req:r1") -> Booking:
    """A booking of ``claims`` (GPU key → bytes) for the instance ``key`` on worker 1."""
    row = json.dumps({"name": key, "worker_id": 1, "gpu_type": "cuda"})
    meta = json.dumps({"src": "gpusched", "rid": key[4:], "pin": False, "w": [1]})
    data = json.dumps({"instance_key": key, "row": json.loads(row), "meta": json.loads(meta)})
    return Booking(key, row, meta, encode_amounts(claims), data)


def reserve_booking(h: Harness, booked: Booking, retry_due_ms: int = 0) -> Reserved:
    """Run ``reserve.lua`` for ``r1``'s attempt (0, 0), decision ``d``."""
    call = h.rt.cluster.reserve_call("r1", 0, 0, booked, retry_due_ms, "{}", result_digest="d")
    return h.rt.partition.call(call)


def set_capacity(h: Harness, **gpus: int) -> None:
    """Set ledger capacities; ``1_cuda_0=100`` is GPU key ``1:cuda:0``."""
    h.rt.client.hset(h.rt.keys.capacity, mapping={k.replace("_", ":"): v for k, v in gpus.items()})


def reject(h: Harness, rid: str, result_json: str) -> tuple[str, str | None]:
    """Publish an edge rejection of ``rid`` with ``result_json``."""
    return h.rt.results.reject(
        rid, request_json="{}", request_digest="rd", result_json=result_json, result_digest="d", error=None
    )


def park(h: Harness, rid: str, seq: int, epoch: int = 0, announce: bool = True) -> tuple[str, str | None]:
    """Park ``rid`` at ``(seq, 0)`` (decision ``d``) for ``insufficient_vram``."""
    return h.rt.partition.call(h.rt.parked.park_call(
        rid,
        seq,
        0,
        result_digest="d",
        parked_entry=json.dumps({"seq": seq, "reasons": ["insufficient_vram"]}),
        notice_json="",
        event_data="{}",
        epoch=epoch,
        requeue_due_ms=5,
        announce=announce,
    ))


def recorded_step(rid: str = "r1", seq: int = 0, attempt: int = 0) -> str:
    """The JSON of a ``reserve`` step of decision ``d``."""
    return json.dumps(
        {
            "request_id": rid,
            "seq": seq,
            "attempt": attempt,
            "action": "reserve",
            "status": "scheduled",
            "version": 0,
            "epoch": 0,
            "result_digest": "d",
        }
    )
