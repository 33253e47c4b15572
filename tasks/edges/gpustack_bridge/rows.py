"""GPUStack's rows as the bridge reads them: validated, then reduced to what placement reads.

GPUStack is a control plane the bridge trusts to *describe* the cluster, not to send
well-formed data: every row passes the service's own door before it is used — the core's
row models and the key alphabets of :mod:`tasks.intake.names`, through
:func:`tasks.intake.snapshots.parse_snapshot` on a one-row document — and a row that fails
is refused with the field named (:class:`RowRefused`), never stored, never a crash.

The reduced rows keep what placement reads and drop what changes on every heartbeat
(utilisation, temperature, ``memory.used``, ``heartbeat_time``, GPUStack's injected
``allocated``), so a status post that changes nothing placement reads changes nothing in
gpusched either.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from scheduler_core import ModelSpec
from tasks.intake.limits import InvalidField
from tasks.intake.snapshots import parse_snapshot

Row = dict[str, Any]

#: Largest row id accepted (ids become keys and request ids; GPUStack's are 64-bit integers).
MAX_ID = (1 << 63) - 1
#: Worker fields placement reads (the rest of GPUStack's row is dropped).
WORKER_FIELDS = (
    "id",
    "name",
    "ip",
    "ifname",
    "port",
    "advertise_address",
    "cluster_id",
    "labels",
    "state",
    "system_reserved",
)
#: GPU fields placement reads.
GPU_FIELDS = (
    "uuid",
    "name",
    "vendor",
    "type",
    "index",
    "device_index",
    "device_chip_index",
    "arch_family",
    "compute_capability",
)
#: Instance fields a claim is computed from (``ModelInstance`` of Contract 1) plus what the
#: bridge identifies an instance by.
#: The fields that name where a model comes from (``source`` says which one applies).
SOURCE_FIELDS = (
    "local_path",
    "huggingface_repo_id",
    "huggingface_filename",
    "model_scope_model_id",
    "model_scope_file_path",
    "ollama_library_model_name",
)
INSTANCE_FIELDS = (
    "id",
    "name",
    "model_id",
    "model_name",
    "backend",
    "state",
    "state_message",
    "worker_id",
    "worker_name",
    "gpu_type",
    "gpu_indexes",
    "computed_resource_claim",
    "distributed_servers",
    "created_at",
    "cluster_id",
    "source",
    *SOURCE_FIELDS,
)
#: Instance fields that say nothing about what it holds (left out of the rows gpusched decides on).
NOT_CLAIMS = ("created_at", "state_message")
#: The model fields Contract 1's ``model`` has (the rest of GPUStack's model row is dropped).
MODEL_FIELDS = tuple(sorted(ModelSpec.model_fields))


class RowRefused(ValueError):
    """A row GPUStack sent that the bridge cannot use; ``field`` names the problem."""

    def __init__(self, kind: str, field: str, message: str) -> None:
        super().__init__(f"{kind} row refused: {field}: {message}")
        self.field = field


def row_id(row: Any, kind: str) -> int:
    """The row's ``id``: a positive integer below 2^63.

    Raises:
        RowRefused: no such id.
    """
    value = row.get("id") if isinstance(row, dict) else None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= MAX_ID:
        raise RowRefused(kind, "id", "must be a positive integer below 2^63")
    return value


def _door(document: Row, kind: str) -> None:
    """The service's own snapshot door on a one-row document."""
    try:
        parse_snapshot(document)
    except InvalidField as error:
        raise RowRefused(kind, error.field, error.message) from None
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        raise RowRefused(kind, where, str(first["msg"])) from None


def _memory(value: Any) -> Row | None:
    if not isinstance(value, dict):
        return None
    return {k: value[k] for k in ("total", "is_unified_memory") if k in value}


def _gpu(device: Any) -> Any:
    if not isinstance(device, dict):
        return device  # the door names it
    reduced = {k: device[k] for k in GPU_FIELDS if k in device}
    if "memory" in device:
        reduced["memory"] = _memory(device["memory"])
    return reduced


def worker_row(row: Any) -> Row:
    """A GPUStack worker row reduced to what placement reads, validated.

    Raises:
        RowRefused: the row is not a valid worker (the field is named).
    """
    row_id(row, "worker")
    reduced = {k: row[k] for k in WORKER_FIELDS if k in row}
    status = row.get("status")
    if isinstance(status, dict):
        devices = status.get("gpu_devices")
        reduced["status"] = {
            "memory": _memory(status.get("memory")),
            "gpu_devices": [_gpu(d) for d in devices] if isinstance(devices, list) else devices,
        }
    _door({"workers": [reduced], "model_instances": []}, "worker")
    return reduced


def instance_row(row: Any) -> Row:
    """A GPUStack model-instance row reduced to its identity and claims, validated.

    Raises:
        RowRefused: the row is not a valid instance (the field is named).
    """
    row_id(row, "instance")
    reduced = {k: row[k] for k in INSTANCE_FIELDS if k in row}
    if not isinstance(reduced.get("name"), str) or not reduced["name"]:
        raise RowRefused("instance", "name", "must be a non-empty string")
    claim_row = claims_view(reduced)
    _door({"workers": [], "model_instances": [claim_row]}, "instance")
    return reduced


def claims_view(instance: Row) -> Row:
    """An instance row as gpusched's ``model_instances`` takes it (without what holds no claim)."""
    return {k: v for k, v in instance.items() if k not in NOT_CLAIMS}


def model_row(row: Any) -> Row:
    """A GPUStack model row reduced to Contract 1's ``model``, validated.

    Raises:
        RowRefused: the row is not a valid model (the field is named).
    """
    row_id(row, "model")
    reduced = {k: row[k] for k in MODEL_FIELDS if k in row}
    try:
        ModelSpec.model_validate(reduced)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        raise RowRefused("model", ".".join(str(p) for p in first["loc"]), str(first["msg"])) from None
    return reduced


REDUCERS = {"workers": worker_row, "models": model_row, "model-instances": instance_row}
