"""Validating a control-plane snapshot: ``{"workers": [...], "model_instances": [...]}``.

What ``gpusched cluster apply`` and the ``snapshot`` cluster event send.
Rows are validated by the core's models (an error names
``workers.<n>.<field>``) and keyed; duplicates are refused naming the later
row. Nothing is written for an invalid snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from scheduler_core import ModelInstance, Worker
from tasks.state.rows import snapshot_instance_key


class InvalidField(ValueError):
    """Input that validates field by field but is inconsistent; ``field`` names where."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


#: The keys every snapshot must have (an empty list is a valid value; an absent key is not).
REQUIRED_KEYS = ("workers", "model_instances")


@dataclass(frozen=True, slots=True)
class SnapshotRows:
    """A control-plane snapshot: worker rows and instance rows, validated, keyed."""

    workers: tuple[Worker, ...]
    instances: tuple[tuple[str, ModelInstance], ...]


def parse_snapshot(document: Mapping[str, Any]) -> SnapshotRows:
    """Validate a snapshot document ``{"workers": [...], "model_instances": [...]}``.

    Both keys are required (:data:`REQUIRED_KEYS`): a snapshot is the whole
    cluster, so a document that lacks one is truncated, not empty.

    Raises:
        pydantic.ValidationError: a row has a wrong type (the error names it).
        InvalidField: a required key is missing (naming it), duplicate worker
            ids or instance keys (naming the later row).
    """
    missing = [key for key in REQUIRED_KEYS if key not in document]
    if missing:
        needed = " and ".join(REQUIRED_KEYS)
        raise InvalidField(missing[0], f"required key missing (a snapshot needs {needed}; "
                           f"missing: {', '.join(missing)})")
    parsed = _SnapshotDocument.model_validate(document)
    seen_ids: set[int] = set()
    for position, worker in enumerate(parsed.workers):
        if worker.id in seen_ids:
            raise InvalidField(f"workers.{position}.id", f"duplicate worker id {worker.id}")
        seen_ids.add(worker.id)
    keyed: list[tuple[str, ModelInstance]] = []
    seen: set[str] = set()
    raw_rows = document.get("model_instances") or ()
    for position, (row, instance) in enumerate(zip(raw_rows, parsed.model_instances, strict=True)):
        key = snapshot_instance_key(row, position)
        if key in seen:
            raise InvalidField(f"model_instances.{position}", f"duplicate instance {key}")
        seen.add(key)
        keyed.append((key, instance))
    return SnapshotRows(tuple(parsed.workers), tuple(keyed))


class _SnapshotDocument(BaseModel):
    """Validation shape of a snapshot (errors name ``workers.<n>.<field>``)."""

    model_config = ConfigDict(extra="ignore")

    workers: list[Worker] = Field(default_factory=list)
    model_instances: list[ModelInstance] = Field(default_factory=list)

    @field_validator("workers", "model_instances", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value
