"""The cluster events ``gpusched.cluster_event`` accepts (validated, discriminated by ``kind``).

How each is applied: :mod:`tasks.flows.cluster_changes`.

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

:func:`parse_event` is the door every event passes (the worker's
``gpusched.cluster_event`` and the client before it queues one): the
document's size, nesting and Unicode (:mod:`tasks.intake.limits`), its shape
(the models below; an unknown ``kind`` names ``kind``), and the identifiers
that become keys (:mod:`tasks.intake.names`). :func:`check_against_worker`
adds what only the current cluster can tell (an unknown worker id, a GPU the
worker does not have); the client runs it before queueing, so a control
plane hears about a bad event at once instead of in a worker's log.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from scheduler_core import WORKER_STATES, Worker
from tasks.base.rows import booked_instance_key
from tasks.intake.limits import IntakeLimits, InvalidField, check_document, check_size
from tasks.intake.names import GPU_TYPE, REQUEST_ID, check_name, check_worker_row

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
    """A whole snapshot (what ``gpusched cluster apply`` sends); both lists are required.

    ``allow_removal`` confirms a snapshot that removes more than
    ``max_removed_fraction`` of the workers (refused otherwise).
    """

    kind: Literal["snapshot"]
    workers: list[dict[str, Any]]
    model_instances: list[dict[str, Any]]
    allow_removal: bool = False


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


#: Instance keys an ``instance_deleted`` event may name (see :mod:`tasks.base.rows`).
INSTANCE_KEY = re.compile(r"(?:id|pos):-?[0-9]{1,19}|name:.{1,255}|req:.{1,200}", re.DOTALL)


def parse_event(raw: Any, limits: IntakeLimits | None = None) -> ClusterEvent:
    """Validate one cluster event: size, nesting, Unicode, shape and key alphabets.

    A snapshot event's rows are checked by :func:`tasks.intake.snapshots.parse_snapshot`
    when it is applied.

    Raises:
        InvalidField: naming the offending field (``kind`` for an unknown or missing kind).
    """
    limits = limits or IntakeLimits()
    if not isinstance(raw, Mapping):
        raise InvalidField("event", "expected a JSON object with a kind")
    check_document(raw)
    text = json.dumps(raw, separators=(",", ":"))
    if raw.get("kind") == "snapshot":
        check_size(text, limits.max_snapshot_bytes, field="snapshot", setting="max_snapshot_bytes")
    else:
        check_size(text, limits.max_event_bytes, field="event", setting="max_event_bytes")
    try:
        event = EVENT_ADAPTER.validate_python(raw)
    except ValidationError as error:
        raise event_error(error) from None
    _check_names(event)
    return event


def event_error(error: ValidationError) -> InvalidField:
    """The first validation error as an :class:`InvalidField` (without the ``kind`` prefix)."""
    first = error.errors(include_url=False)[0]
    loc = [str(part) for part in first["loc"]]
    if loc and loc[0] in KINDS:
        loc = loc[1:]
    if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
        return InvalidField("kind", f"must be one of {', '.join(sorted(KINDS))}")
    return InvalidField(".".join(loc) or "event", str(first["msg"]).removeprefix("Value error, "))


def _check_names(event: ClusterEvent) -> None:
    if isinstance(event, WorkerUpsertEvent):
        check_worker_row(event.worker.name, [gpu.type for gpu in event.worker.gpus], "worker")
    elif isinstance(event, GpuMemoryEvent):
        for position, gpu in enumerate(event.gpus):
            check_name(gpu.type, GPU_TYPE, f"gpus.{position}.type", optional=True)
    elif isinstance(event, InstanceDeletedEvent):
        if event.instance_key is not None and not INSTANCE_KEY.fullmatch(event.instance_key):
            raise InvalidField("instance_key", "must be id:<n>, name:<name>, pos:<n> or req:<request id>")
        check_name(event.request_id, REQUEST_ID, "request_id", optional=True)
        event.key()


def event_worker_id(event: ClusterEvent) -> tuple[str, int] | None:
    """(field, worker id) of the worker an event changes, None for instance and snapshot events."""
    if isinstance(event, WorkerUpsertEvent):
        return "worker.id", event.worker.id
    if isinstance(event, WorkerRemovedEvent | WorkerStateEvent | GpuMemoryEvent | WorkerLabelsEvent):
        return "worker_id", event.worker_id
    return None


def check_against_worker(event: ClusterEvent, current: Worker | None) -> None:
    """Refuse an event that does not fit the cluster: an unknown worker (but ``worker_added``),
    or a ``gpu_memory_changed`` naming a GPU the worker does not have.

    Args:
        event: a validated event.
        current: the stored row of the worker it names (None: no such worker).

    Raises:
        InvalidField: ``worker_id`` / ``worker.id``, or ``gpus.<n>.index``.
    """
    named = event_worker_id(event)
    if named is None or event.kind == "worker_added":
        return
    field, worker_id = named
    if current is None:
        raise InvalidField(field, f"no worker {worker_id} in the cluster")
    if isinstance(event, GpuMemoryEvent):
        devices = current.gpus
        for position, gpu in enumerate(event.gpus):
            if not any(d.index == gpu.index and gpu.type in (None, d.type) for d in devices):
                kind = f"{gpu.type} GPU" if gpu.type else "GPU"
                raise InvalidField(f"gpus.{position}.index",
                                   f"worker {worker_id} has no {kind} with index {gpu.index}")
