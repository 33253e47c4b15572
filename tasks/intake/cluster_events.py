"""The cluster events ``gpusched.cluster_event`` accepts (validated, discriminated by ``kind``).

How each is applied: :mod:`tasks.state.cluster_changes`.

==================== ====================================================
kind                 payload
==================== ====================================================
worker_added         ``worker``: a GPUStack Worker row
worker_updated       ``worker``: the full new row
worker_removed       ``worker_id``
worker_state         ``worker_id``, ``state`` (ready, not_ready, unreachable, ...)
gpu_memory_changed   ``worker_id``, ``gpus``: [{type, index, total}]
worker_labels        ``worker_id``, ``labels``
instance_deleted     one of ``instance_key``, ``instance_id``, ``request_id``
request_cancelled    ``request_id`` (same as ``gpusched cancel``)
snapshot             ``workers``, ``model_instances`` (same as ``cluster apply``)
==================== ====================================================
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from scheduler_core import WORKER_STATES, Worker
from tasks.intake.snapshots import InvalidField
from tasks.state.rows import booked_instance_key

#: Every ``kind`` value.
KINDS = frozenset(
    {"worker_added", "worker_updated", "worker_removed", "worker_state", "gpu_memory_changed",
     "worker_labels", "instance_deleted", "request_cancelled", "snapshot"}
)


class _Event(BaseModel):
    """Base of the event payloads: unknown fields are errors (a typo must not pass)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class WorkerUpsertEvent(_Event):
    """A worker joined or changed; ``worker`` is its full row."""

    kind: Literal["worker_added", "worker_updated"]
    worker: Worker


class WorkerRemovedEvent(_Event):
    """A worker left the cluster."""

    kind: Literal["worker_removed"]
    worker_id: int


class WorkerStateEvent(_Event):
    """A worker's state changed (GPUStack ``WorkerStateEnum``)."""

    kind: Literal["worker_state"]
    worker_id: int
    state: str

    @field_validator("state")
    @classmethod
    def _known(cls, value: str) -> str:
        if value.lower() not in WORKER_STATES:
            raise ValueError(f"unknown worker state {value!r}")
        return value.lower()


class GpuMemory(_Event):
    """New total memory of one GPU (``type`` None: the worker's GPUs with that index)."""

    type: str | None = None
    index: int
    total: int = Field(ge=0)


class GpuMemoryEvent(_Event):
    """GPU memory totals changed (a GPU replaced, MIG re-partitioned, ...)."""

    kind: Literal["gpu_memory_changed"]
    worker_id: int
    gpus: list[GpuMemory] = Field(min_length=1)


class WorkerLabelsEvent(_Event):
    """A worker's labels were replaced."""

    kind: Literal["worker_labels"]
    worker_id: int
    labels: dict[str, str]


class InstanceDeletedEvent(_Event):
    """An instance was deleted; its claims are released (idempotent)."""

    kind: Literal["instance_deleted"]
    instance_key: str | None = None
    instance_id: int | None = None
    request_id: str | None = None

    def key(self) -> str:
        """The ledger key this event names.

        Raises:
            InvalidField: none of the identifiers is given.
        """
        if self.instance_key:
            return self.instance_key
        if self.instance_id is not None:
            return f"id:{self.instance_id}"
        if self.request_id:
            return booked_instance_key(self.request_id)
        raise InvalidField("instance_key", "instance_deleted needs instance_key, instance_id or request_id")


class RequestCancelledEvent(_Event):
    """A request is withdrawn (queued, parked, retrying or in flight; a placement is released)."""

    kind: Literal["request_cancelled"]
    request_id: str = Field(min_length=1)


class SnapshotEvent(_Event):
    """A whole snapshot (what ``gpusched cluster apply`` sends)."""

    kind: Literal["snapshot"]
    workers: list[dict[str, Any]] = Field(default_factory=list)
    model_instances: list[dict[str, Any]] = Field(default_factory=list)


ClusterEvent = Annotated[
    WorkerUpsertEvent
    | WorkerRemovedEvent
    | WorkerStateEvent
    | GpuMemoryEvent
    | WorkerLabelsEvent
    | InstanceDeletedEvent
    | RequestCancelledEvent
    | SnapshotEvent,
    Field(discriminator="kind"),
]
EVENT_ADAPTER: TypeAdapter[ClusterEvent] = TypeAdapter(ClusterEvent)
