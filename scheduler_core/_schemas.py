"""Contract 1 wire models: GPUStack rows in, the scheduling result out.

Inbound models accept GPUStack's Worker / Model / ModelInstance rows as they
are: unknown fields are ignored, wrong types are rejected, legacy aliases are
honoured. They are never mutated by the core.
"""

from __future__ import annotations

import functools
import operator
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetPydanticSchema,
    StrictBool,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic_core import core_schema as cs
from typing_extensions import TypedDict

from scheduler_core.limits import render_text

#: Worker states GPUStack knows (``WorkerStateEnum``); only ``ready`` is schedulable.
WORKER_STATES = frozenset(
    {
        "not_ready",
        "ready",
        "unreachable",
        "pending",
        "provisioning",
        "initializing",
        "deleting",
        "error",
        "maintenance",
    }
)

#: The pattern a worker's (lower-cased) state must match.
_WORKER_STATE = "^(" + "|".join(sorted(WORKER_STATES)) + ")$"

#: Model categories GPUStack knows (``CategoryEnum``).
MODEL_CATEGORIES = frozenset(
    {"llm", "embedding", "image", "reranker", "speech_to_text", "text_to_speech", "unknown"}
)

#: Scheduling policies this build implements (``gpustack`` is the default), in the order the
#: registry registered them (:func:`scheduler_core.plugins.register_policy`).
POLICIES: list[str] = []


#: Largest byte count or id accepted (a signed 64-bit integer): GPUStack stores them in
#: BIGINT columns, and anything larger is not a real size (it would also overflow floats).
MAX_INT = 2**63 - 1
#: Bytes, never negative.
Bytes = Annotated[int, Field(ge=0, le=MAX_INT)]
#: Row ids and GPU indexes.
Id = Annotated[int, Field(ge=0, le=MAX_INT)]
#: Counts a deployment asks for (replicas, GPUs per replica).
Count = Annotated[int, Field(ge=0, le=1_000_000)]


class _Row(BaseModel):
    """Base for inbound rows: ignore unknown fields, never mutate after parsing."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


# --------------------------------------------------------------------------- workers


# A worker reports a status subtree per GPU (thousands per cluster). Its memory is
# validated into a plain dict (a TypedDict); its GPUs go straight into the ``Gpu``
# tuples placement reads (see :data:`GpuDevices`). Unknown keys are dropped.


class MemoryInfo(TypedDict, total=False):
    """``MemoryInfo``: bytes. Read with ``.get``: a missing ``total`` is 0."""

    total: Bytes
    used: Bytes | None
    is_unified_memory: bool


class Gpu(NamedTuple):
    """One GPU of a worker (``GPUDeviceStatus``), as validated and as placement reads it.

    ``index`` is unique per ``type`` only. ``total`` is the device's
    ``memory.total`` (0 when it reports none); ``used`` its ``memory.used`` (None
    when not reported): memory held by any process, the ledger's instances and
    others alike, read by ``policy: precise`` only (GPUStack ignores it).
    ``unified_memory`` is ``memory.is_unified_memory`` as reported (None: not
    reported), kept so the row dumps as it came; placement reads the worker's.

    A named tuple: immutable, hashable by value, and built by pydantic without a
    Python call (2,000 workers report 16,000 GPUs). Its ``index`` field shadows
    ``tuple.index``, which nothing here uses.
    """

    type: str | None
    index: int | None  # type: ignore[assignment]
    total: int
    vendor: str | None = None
    name: str | None = None
    used: int | None = None
    unified_memory: bool | None = None


def _optional_key(
    schema: cs.CoreSchema, default: Any = None, *aliases: list[str | int]
) -> cs.TypedDictField:
    """An optional key of a row (``default`` when absent), read at the first of ``aliases``
    (paths of keys) that is there when given."""
    return cs.typed_dict_field(
        cs.with_default_schema(schema, default=default), required=False,
        validation_alias=list(aliases) if aliases else None,
    )


def _bytes() -> cs.IntSchema:
    """A byte count or id: 0 to :data:`MAX_INT`."""
    return cs.int_schema(ge=0, le=MAX_INT)


def _as_tuple(
    cls: type[tuple[Any, ...]], row: cs.TypedDictSchema, serialization: cs.SerSchema | None = None
) -> cs.CoreSchema:
    """``row`` (a typed dict with every one of the named tuple ``cls``'s fields filled in)
    validated into a ``cls`` by C-level callables, without a Python call per row:
    ``itemgetter`` takes the fields in the tuple's order, ``tuple.__new__`` makes the tuple."""
    fields = cs.no_info_after_validator_function(operator.itemgetter(*cls._fields), row)  # type: ignore[attr-defined]
    return cs.no_info_after_validator_function(
        functools.partial(tuple.__new__, cls), fields, serialization=serialization
    )


#: Any JSON object or Python mapping, with pydantic's own error otherwise (``dict_type``:
#: "Input should be a valid dictionary", "an object" from JSON). A ``dict`` passes an
#: ``isinstance`` check, several times cheaper than a typed dict's.
_OBJECT = cs.json_or_python_schema(
    json_schema=cs.typed_dict_schema({}, extra_behavior="ignore"),
    python_schema=cs.custom_error_schema(
        cs.union_schema([cs.is_instance_schema(dict), cs.typed_dict_schema({}, extra_behavior="ignore")]),
        custom_error_type="dict_type",
    ),
)


def _gpu_devices_schema() -> cs.CoreSchema:
    """``status.gpu_devices``: a list of device rows validated into a tuple of :class:`Gpu`.

    Each row is a typed dict with every key filled in (the memory fields read through
    alias paths), which C-level callables turn into a :class:`Gpu` (:func:`_as_tuple`). Errors
    are pydantic's, at the same locations and in the same order as the row's own
    shape (``memory.total`` before ``memory.used`` before ``memory.is_unified_memory``;
    ``memory`` itself must be an object or null); unknown keys are ignored. Dumped
    back as device rows (:func:`_device_rows`).
    """
    count = cs.nullable_schema(_bytes())
    text = cs.nullable_schema(cs.str_schema())
    row = cs.typed_dict_schema(
        {
            "name": _optional_key(text),
            "vendor": _optional_key(text),
            "type": _optional_key(text),
            "index": _optional_key(count),
            "total": _optional_key(_bytes(), 0, ["memory", "total"]),
            "used": _optional_key(count, None, ["memory", "used"]),
            "unified_memory": _optional_key(cs.bool_schema(), None, ["memory", "is_unified_memory"]),
            # The memory fields are read above through paths, which skip a memory that is not an
            # object: this field rejects one (its keys are the fields above).
            "memory": _optional_key(cs.nullable_schema(_OBJECT)),
        },
        extra_behavior="ignore",
    )
    gpu = _as_tuple(Gpu, row)
    return cs.no_info_after_validator_function(
        tuple,
        cs.list_schema(gpu),
        serialization=cs.plain_serializer_function_ser_schema(
            _device_rows, return_schema=cs.list_schema(_DEVICE_ROW)
        ),
    )


def _dumped(*keys: str, **nested: cs.CoreSchema) -> cs.TypedDictSchema:
    """A typed dict of ``keys`` dumped as they are (``exclude_none`` drops the None ones)."""
    fields = {key: cs.typed_dict_field(cs.any_schema()) for key in keys}
    return cs.typed_dict_schema(fields | {key: cs.typed_dict_field(schema) for key, schema in nested.items()})


#: A device row as dumped, in ``GPUDeviceStatus`` order: the stored rows drop its None fields.
_DEVICE_ROW = _dumped(
    "name", "vendor", "type", "index",
    memory=cs.nullable_schema(_dumped("total", "used", "is_unified_memory")),
)


def _device_rows(gpus: tuple[Gpu, ...]) -> list[dict[str, Any]]:
    """The GPUs as ``GPUDeviceStatus`` rows; a GPU that reports no memory dumps without ``memory``."""
    return [
        {
            "name": gpu.name,
            "vendor": gpu.vendor,
            "type": gpu.type,
            "index": gpu.index,
            "memory": None
            if gpu.total == 0 and gpu.used is None and gpu.unified_memory is None
            else {"total": gpu.total, "used": gpu.used, "is_unified_memory": gpu.unified_memory},
        }
        for gpu in gpus
    ]


#: ``status.gpu_devices`` as the core reads it: a tuple of :class:`Gpu`.
GpuDevices = Annotated[tuple[Gpu, ...], GetPydanticSchema(lambda _type, _handler: _gpu_devices_schema())]


class WorkerStatus(TypedDict, total=False):
    """The scheduling-relevant part of ``WorkerStatus``."""

    memory: MemoryInfo | None
    gpu_devices: GpuDevices | None


class SystemReserved(NamedTuple):
    """Reserved bytes; ``memory``/``gpu_memory`` are GPUStack's legacy key names.

    Built by pydantic without a Python call, as :class:`Gpu` is (one per worker row).
    """

    ram: int = 0
    vram: int = 0


def _reserved_schema() -> cs.CoreSchema:
    """``system_reserved``: an object whose ``ram`` (or ``memory``) and ``vram`` (or
    ``gpu_memory``) are bytes, 0 when absent; unknown keys ignored."""
    row = cs.typed_dict_schema(
        {
            "ram": _optional_key(_bytes(), 0, ["ram"], ["memory"]),
            "vram": _optional_key(_bytes(), 0, ["vram"], ["gpu_memory"]),
        },
        extra_behavior="ignore",
    )
    return _as_tuple(SystemReserved, row, cs.plain_serializer_function_ser_schema(
        SystemReserved._asdict, return_schema=_dumped(*SystemReserved._fields)
    ))


#: ``system_reserved`` as placement reads it: a :class:`SystemReserved`.
ReservedField = Annotated[SystemReserved, GetPydanticSchema(lambda _type, _handler: _reserved_schema())]


class Worker(_Row):
    """A GPUStack ``Worker`` row."""

    id: Id
    name: str
    ip: str | None = None
    ifname: str | None = None
    cluster_id: Id | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    #: Lower-cased, then one of :data:`WORKER_STATES` (checked natively: thousands of rows).
    state: Annotated[str, StringConstraints(to_lower=True, pattern=_WORKER_STATE)] = "not_ready"
    system_reserved: ReservedField | None = None
    status: WorkerStatus | None = None

    @field_validator("labels", mode="before")
    @classmethod
    def _null_labels(cls, value: Any) -> Any:
        return {} if value is None else value

    @property
    def gpus(self) -> tuple[Gpu, ...]:
        """The worker's GPUs (``status.gpu_devices``), in reported order; empty when none."""
        status = self.status
        return (status.get("gpu_devices") or ()) if status else ()


# --------------------------------------------------------------------------- models


class GPUSelector(_Row):
    """Manual GPU selection: ``gpu_ids`` are ``<worker_name>:<type>:<index>``."""

    gpu_ids: list[str] | None = None
    #: 0 means unset, as in GPUStack (``_set_gpu_count``: ``gpus_per_replica or len(gpu_ids)``).
    gpus_per_replica: Count | None = None


class ExtendedKVCache(_Row):
    """Extended KV cache settings, the only source of RAM claims for SGLang."""

    enabled: bool = False
    ram_ratio: float | None = 1.2
    ram_size: float | None = None
    chunk_size: Count | None = None


class LoraEntry(_Row):
    """A LoRA adapter; its size comes from ``weight_bytes`` or a ``local_path`` folder."""

    name: str | None = None
    weight_bytes: Bytes | None = None
    local_path: str | None = None
    huggingface_repo_id: str | None = None


#: Longest model name, repo id or path, and backend parameter accepted: each can reach a
#: message or the launch line, so an unbounded one makes a megabyte-long result.
MAX_NAME = 1024
MAX_PATH = 4096
MAX_PARAMETER = 65536


def _at_most(limit: int) -> AfterValidator:
    """A length bound checked after the string is read (a lone surrogate keeps its own error)."""

    def check(value: str) -> str:
        if len(value) > limit:
            raise ValueError(f"String should have at most {limit} characters")
        return value

    return AfterValidator(check)


Name = Annotated[str, _at_most(MAX_NAME)]
PathText = Annotated[str, _at_most(MAX_PATH)]
Parameter = Annotated[str, _at_most(MAX_PARAMETER)]


class ModelSpec(_Row):
    """A GPUStack ``Model`` row plus gpusched's hub-free model facts."""

    id: Id | None = None
    name: Name = ""
    cluster_id: Id | None = None
    #: None is accepted (GPUStack's schema allows it) and placed as SGLang.
    backend: str | None = "SGLang"
    backend_version: str | None = None
    backend_parameters: list[Parameter] = Field(default_factory=list)
    categories: list[str] = Field(default_factory=list)
    replicas: Count = 1
    placement_strategy: Literal["spread", "binpack"] = "spread"
    distributed_inference_across_workers: bool | None = None
    worker_selector: dict[str, str] | None = None
    gpu_selector: GPUSelector | None = None
    extended_kv_cache: ExtendedKVCache | None = None
    lora_list: list[LoraEntry] | None = None
    env: dict[str, str] | None = None
    source: str | None = None
    huggingface_repo_id: Name | None = None
    model_scope_model_id: Name | None = None
    local_path: PathText | None = None
    hf_config: dict[str, Any] | None = None
    weight_bytes: Bytes | None = None

    @field_validator("backend_parameters", "categories", mode="before")
    @classmethod
    def _null_list(cls, value: Any) -> Any:
        return [] if value is None else value

    @field_validator("backend")
    @classmethod
    def _sglang_only(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if value.lower() != "sglang":
            raise ValueError(f"backend {value!r} is not supported; gpusched places SGLang models")
        return "SGLang"

    @field_validator("categories")
    @classmethod
    def _known_categories(cls, value: list[str]) -> list[str]:
        for category in value:
            if category not in MODEL_CATEGORIES:
                raise ValueError(f"unknown category {category!r}")
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {
                key: str(item) if isinstance(item, int | float) and not isinstance(item, bool) else item
                for key, item in value.items()
            }
        return value


# --------------------------------------------------------------------------- instances


class ComputedResourceClaim(NamedTuple):
    """A resource claim (``ComputedResourceClaim``): ``vram`` maps GPU index to bytes.

    As validated and as the ledger reads it. A named tuple built by pydantic without a
    Python call, as :class:`Gpu` is (4,000 instance rows carry one each: a model per claim
    cost more than the rest of the row); the row's JSON object in and out (a dump drops
    the None fields only where the row's dump does).
    """

    vram: dict[int, int] | None = None
    ram: int | None = None
    vram_utilization: float | None = None
    estimated_vram: int | None = None
    is_unified_memory: bool | None = None


def _claim_schema() -> cs.CoreSchema:
    """A claim object validated into a :class:`ComputedResourceClaim`.

    A typed dict of the row's fields (each optional, None when absent; unknown keys
    ignored), which C-level callables turn into the named tuple: the same errors at
    the same locations as the claim's own fields, and "Input should be a valid
    dictionary" for a claim that is not an object.
    """
    count = cs.nullable_schema(_bytes())
    row = cs.typed_dict_schema(
        {
            "vram": _optional_key(cs.nullable_schema(cs.dict_schema(_bytes(), _bytes()))),
            "ram": _optional_key(count),
            "vram_utilization": _optional_key(cs.nullable_schema(cs.float_schema())),
            "estimated_vram": _optional_key(count),
            "is_unified_memory": _optional_key(cs.nullable_schema(cs.bool_schema())),
        },
        extra_behavior="ignore",
    )
    return _as_tuple(ComputedResourceClaim, row, cs.plain_serializer_function_ser_schema(
        ComputedResourceClaim._asdict, return_schema=_CLAIM_ROW
    ))


#: A claim as dumped: its fields in order, ``vram`` keyed by index (strings in JSON).
_CLAIM_ROW = cs.typed_dict_schema(
    {
        "vram": cs.typed_dict_field(
            cs.nullable_schema(cs.dict_schema(cs.int_schema(), cs.int_schema()))
        ),
        **{key: cs.typed_dict_field(cs.any_schema())
           for key in ("ram", "vram_utilization", "estimated_vram", "is_unified_memory")},
    }
)

#: ``computed_resource_claim`` as the ledger reads it: a :class:`ComputedResourceClaim`.
ClaimField = Annotated[ComputedResourceClaim, GetPydanticSchema(lambda _type, _handler: _claim_schema())]


class SubordinateWorker(_Row):
    """``ModelInstanceSubordinateWorker``: a follower node of a distributed instance."""

    worker_id: Id | None = None
    worker_name: str | None = None
    worker_ip: str | None = None
    worker_ifname: str | None = None
    total_gpus: Count | None = None
    gpu_type: str | None = None
    gpu_indexes: list[Id] | None = None
    computed_resource_claim: ClaimField | None = None


class DistributedServers(_Row):
    """``DistributedServers``: only the subordinate workers matter for placement."""

    mode: str | None = None
    subordinate_workers: list[SubordinateWorker] | None = None


class ModelInstance(_Row):
    """A GPUStack ``ModelInstance`` row that holds resources."""

    id: Id | None = None
    name: str | None = None
    model_id: Id | None = None
    model_name: str | None = None
    backend: str | None = None
    state: str | None = None
    worker_id: Id | None = None
    worker_name: str | None = None
    gpu_type: str | None = None
    gpu_indexes: list[Id] | None = None
    computed_resource_claim: ClaimField | None = None
    distributed_servers: DistributedServers | None = None


class InstanceRef(_Row):
    """Which instance row a request replaces: its ``id``, its ``name``, or both (both must match)."""

    id: int | None = None
    name: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _names_one(self) -> InstanceRef:
        if self.id is None and self.name is None:
            raise ValueError("give the replaced instance's id or name")
        return self

    def matches(self, instance: ModelInstance) -> bool:
        """True for the row this reference names."""
        if self.id is not None and instance.id != self.id:
            return False
        return self.name is None or instance.name == self.name


class ScheduleRequest(_Row):
    """A scheduling request (Contract 1).

    ``workers``/``model_instances`` may be omitted only when a service supplies
    the cluster state; the pure core rejects a request without ``workers``.

    ``min_context_tokens``, ``min_kv_tokens``, ``gpu_sharing`` and ``replaces``
    are read by ``policy: precise`` only (``gpustack`` ignores them):

    * ``min_context_tokens``: the KV-cache floor every candidate must hold (default:
      the model's maximum context, capped at 8,192 tokens);
    * ``min_kv_tokens``: the least predicted KV-cache capacity a candidate may have;
    * ``gpu_sharing``: size ``--mem-fraction-static`` to what the instance needs so
      several instances share a GPU (None: the chain's setting);
    * ``replaces``: the instance row this request re-places; its claim is not counted.
    """

    request_id: str | None = Field(default=None, min_length=1, max_length=200)
    policy: str = "gpustack"
    model: ModelSpec
    workers: list[Worker] | None = None
    model_instances: list[ModelInstance] | None = None
    min_context_tokens: int | None = Field(default=None, ge=1, le=1 << 24)
    min_kv_tokens: int | None = Field(default=None, ge=1, le=1 << 34)
    gpu_sharing: StrictBool | None = None
    replaces: InstanceRef | None = None

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        if value not in POLICIES:
            raise ValueError(f"unknown policy {value!r}; expected one of {list(POLICIES)}")
        return value


# --------------------------------------------------------------------------- result


def _is_none(value: object) -> bool:
    return value is None


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClaimOut(_Out):
    """A claim as the result reports it (``vram`` keys are GPU indexes as strings)."""

    vram: dict[str, int]
    ram: int | None = None
    vram_utilization: float | None = None
    estimated_vram: int | None = None


class SubordinateOut(_Out):
    """A follower node of a distributed candidate."""

    worker_id: int
    worker_name: str
    worker_ip: str | None = None
    worker_ifname: str | None = None
    gpu_type: str | None = None
    gpu_indexes: list[int]
    total_gpus: int
    computed_resource_claim: ClaimOut


class CandidateOut(_Out):
    """One placement candidate."""

    worker_id: int
    worker_name: str
    worker_ip: str | None = None
    gpu_type: str | None = None
    gpu_indexes: list[int]
    computed_resource_claim: ClaimOut
    overcommit: bool = False
    score: float | None = None
    subordinate_workers: list[SubordinateOut] | None = None
    #: KV-cache tokens ``policy: precise`` predicts; left out of the JSON when None (``gpustack``).
    kv_tokens: int | None = Field(default=None, exclude_if=_is_none)


class EventOut(_Out):
    """A recorded scheduling event."""

    level: str
    action: str
    message: str
    reason: str | None = None


class EstimateOut(_Out):
    """What the model needs: VRAM/RAM claims and the fraction per GPU type."""

    vram_bytes: int
    ram_bytes: int
    mem_fraction_static: dict[str, float]
    weight_bytes: int | None = None
    weight_source: str


class LaunchNodeOut(_Out):
    """Launch arguments for one node of a distributed placement."""

    worker_id: int
    worker_name: str
    node_rank: int
    backend_parameters: list[str]


class LaunchOut(_Out):
    """How to launch the selected candidate."""

    backend_parameters: list[str]
    nodes: list[LaunchNodeOut] | None = None
    diffusion: dict[str, Any] | None = None


class ErrorOut(_Out):
    """Why a request was rejected.

    ``message`` and ``field`` quote input (a field named after a key, a value in a
    message), so both pass :func:`scheduler_core.limits.render_text` as the error is
    built: no error can carry text a serialiser refuses.
    """

    code: str
    message: Annotated[str, AfterValidator(render_text)]
    field: Annotated[str, AfterValidator(render_text)] | None = None


class WorkerRefOut(_Out):
    """A worker named in a failure: its id and name."""

    id: int
    name: str


class FailureOut(_Out):
    """The workers one strategy could not use, for one reason (``describe``'s "why not worker 7").

    ``workers`` counts distinct workers; ``examples`` are the first few the stage met.
    """

    stage: str
    reason: str
    workers: int
    examples: list[WorkerRefOut]


class ScheduleResult(_Out):
    """The scheduling decision (Contract 1)."""

    request_id: str
    #: ``cancelled``: the service's terminal status for a withdrawn request (never from ``schedule()``).
    status: Literal["scheduled", "unschedulable", "rejected", "cancelled"]
    policy: str = "gpustack"
    candidates: list[CandidateOut] = Field(default_factory=list)
    #: How many candidates the selector produced (more than listed when the chain caps them).
    candidates_total: int = 0
    selected: int | None = None
    messages: list[str] = Field(default_factory=list)
    filter_messages: list[str] = Field(default_factory=list)
    #: Reason code of the filter that left no worker (``worker_not_ready``, ``label_mismatch``, ...).
    blocked_by: str | None = None
    state_message: str | None = None
    events: list[EventOut] = Field(default_factory=list)
    #: gpusched's own warnings about the decision (GPUStack's ``messages`` stay GPUStack's).
    warnings: list[str] = Field(default_factory=list)
    estimate: EstimateOut | None = None
    launch: LaunchOut | None = None
    #: Per strategy that ran and reason, the workers it failed (additive: left out of the JSON
    #: when no stage failed a worker, so every result without one reads as before).
    failures: list[FailureOut] | None = Field(default=None, exclude_if=_is_none)
    error: ErrorOut | None = None
