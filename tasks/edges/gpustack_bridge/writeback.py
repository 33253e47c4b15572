"""gpusched's decision written to a GPUStack instance exactly as GPUStack's scheduler writes it.

``scheduler.py: _schedule_one`` sets, on success: ``state: scheduled``, ``state_message: ""``,
the main worker's id, name, IP, advertise address and interface, ``computed_resource_claim``,
``gpu_type``, ``gpu_indexes``, ``gpu_addresses`` and ``distributed_servers`` (its subordinate
workers; mode ``initialize_later`` for SGLang, vLLM and MindIE). On failure it writes
``"No suitable workers.\\nDetails:\\n"`` and the messages, and the state stays (or goes back
to) ``pending``. GPUStack's ``PUT /v2/model-instances/{id}`` validates a whole
``ModelInstanceUpdate``, so every body also carries the instance's ``source``, the source's
own field, ``name`` and ``model_name``, read from the row being written.

:func:`placement_of` reduces a row or a result to the fields a placement is, so the bridge
writes only when GPUStack's row differs from gpusched's decision (idempotent: a restarted
bridge finds its earlier writes and writes nothing).
"""

from __future__ import annotations

from typing import Any

from tasks.edges.gpustack_bridge.rows import SOURCE_FIELDS

Row = dict[str, Any]

#: The fields that identify a row to ``ModelInstanceUpdate`` (source fields as present).
IDENTITY_FIELDS = ("source", "name", "model_name", *SOURCE_FIELDS)
#: Backends whose distributed servers GPUStack starts ``initialize_later``.
INITIALIZE_LATER = frozenset({"vllm", "ascend-mindie", "sglang"})
#: GPUStack's prefix of an unschedulable instance's message.
NO_SUITABLE_WORKERS = "No suitable workers.\nDetails:\n"
#: States in which an instance no longer waits for a placement.
PLACED_STATES = frozenset(
    {"scheduled", "initializing", "downloading", "starting", "running", "error", "unreachable"}
)


def identity(row: Row) -> Row:
    return {key: row[key] for key in IDENTITY_FIELDS if row.get(key) is not None}


def _claim(claim: Any) -> Row:
    claim = claim if isinstance(claim, dict) else {}
    vram = claim.get("vram") or {}
    return {
        "vram": {str(k): int(v) for k, v in sorted(vram.items(), key=lambda kv: int(kv[0]))},
        "ram": claim.get("ram"),
        "vram_utilization": claim.get("vram_utilization"),
    }


def _subordinates(value: Any) -> list[Row]:
    return [
        {
            "worker_id": sub.get("worker_id"),
            "gpu_type": sub.get("gpu_type"),
            "gpu_indexes": list(sub.get("gpu_indexes") or []),
            "claim": _claim(sub.get("computed_resource_claim")),
        }
        for sub in (value or [])
        if isinstance(sub, dict)
    ]


def placement_of_row(row: Row) -> Row | None:
    """The placement an instance row holds (None without a worker)."""
    if row.get("worker_id") is None:
        return None
    servers = row.get("distributed_servers") or {}
    return {
        "worker_id": row.get("worker_id"),
        "gpu_type": row.get("gpu_type"),
        "gpu_indexes": list(row.get("gpu_indexes") or []),
        "claim": _claim(row.get("computed_resource_claim")),
        "subordinates": _subordinates(
            servers.get("subordinate_workers") if isinstance(servers, dict) else None
        ),
    }


def chosen(result: Row) -> Row:
    """The selected candidate of a ``scheduled`` result."""
    return dict(result["candidates"][result["selected"]])


def placement_of_result(result: Row) -> Row:
    """The placement a ``scheduled`` result chose."""
    return placement_of_candidate(chosen(result))


def placement_of_candidate(candidate: Row) -> Row:
    """The placement one candidate of a result stands for."""
    return {
        "worker_id": candidate["worker_id"],
        "gpu_type": candidate.get("gpu_type"),
        "gpu_indexes": list(candidate.get("gpu_indexes") or []),
        "claim": _claim(candidate.get("computed_resource_claim")),
        "subordinates": _subordinates(candidate.get("subordinate_workers")),
    }


def _wire_claim(claim: Any) -> Row:
    claim = claim if isinstance(claim, dict) else {}
    return {
        "vram": dict(claim.get("vram") or {}),
        "ram": claim.get("ram"),
        "vram_utilization": claim.get("vram_utilization"),
    }


def _wire_subordinate(sub: Row, worker: Row | None) -> Row:
    return {
        "worker_id": sub["worker_id"],
        "worker_name": sub.get("worker_name"),
        "worker_ip": sub.get("worker_ip") or (worker or {}).get("ip"),
        "worker_ifname": sub.get("worker_ifname") or (worker or {}).get("ifname"),
        "total_gpus": sub.get("total_gpus"),
        "gpu_type": sub.get("gpu_type"),
        "gpu_indexes": list(sub.get("gpu_indexes") or []),
        "gpu_addresses": [],
        "computed_resource_claim": _wire_claim(sub.get("computed_resource_claim")),
    }


def placement_body(row: Row, result: Row, workers: dict[int, Row], backend: str | None) -> Row:
    """The ``PUT`` body that writes ``result``'s placement to ``row``, as GPUStack's scheduler would.

    ``workers``: the worker rows by id (for the interface and advertise address a result does
    not carry). ``gpu_addresses`` stays empty: GPUStack fills it for Ascend MindIE only.
    """
    candidate = chosen(result)
    main = workers.get(int(candidate["worker_id"])) or {}
    subordinates = candidate.get("subordinate_workers") or []
    servers: Row = {
        "download_model_files": True,
        "subordinate_workers": [_wire_subordinate(s, workers.get(int(s["worker_id"]))) for s in subordinates]
        or None,
    }
    if (backend or "").lower() in INITIALIZE_LATER:
        servers["mode"] = "initialize_later"
    return {
        **identity(row),
        "state": "scheduled",
        "state_message": "",
        "worker_id": candidate["worker_id"],
        "worker_name": candidate.get("worker_name"),
        "worker_ip": candidate.get("worker_ip") or main.get("ip"),
        "worker_ifname": main.get("ifname"),
        "worker_advertise_address": main.get("advertise_address"),
        "computed_resource_claim": _wire_claim(candidate.get("computed_resource_claim")),
        "gpu_type": candidate.get("gpu_type"),
        "gpu_indexes": list(candidate.get("gpu_indexes") or []),
        "gpu_addresses": [],
        "distributed_servers": servers,
    }


def state_message_of(result: Row) -> str:
    """GPUStack's text for an unschedulable (or rejected) result."""
    given = result.get("state_message")
    if isinstance(given, str) and given:
        return given
    error = result.get("error") or {}
    if result.get("status") == "rejected" and error.get("message"):
        return str(error["message"])
    return NO_SUITABLE_WORKERS + "".join(str(m) for m in result.get("messages") or [])


def unschedulable_body(row: Row, result: Row) -> Row:
    """Keep the instance ``pending`` with GPUStack's message (its worker, if any, stays named)."""
    return {**identity(row), "state": "pending", "state_message": state_message_of(result)}


def rejected_body(row: Row, result: Row) -> Row:
    """A request gpusched refused: the instance goes to ``error`` with the reason, as GPUStack's
    scheduler does when its evaluation raises."""
    return {**identity(row), "state": "error", "state_message": state_message_of(result)}
