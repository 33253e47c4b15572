"""``status.gpu_devices`` validated straight into ``Gpu``: the same verdicts as the plain row shape.

The reference is pydantic itself validating GPUStack's ``GPUDeviceStatus`` as a
plainly declared TypedDict (the fields placement reads, unknown keys ignored):
what the core did before it validated rows straight into its views. For any
row, Python or JSON, the fast schema must accept exactly what the reference
accepts, reject with the same first error (location, type, message) and the
same number of errors, read the same values, and dump the row as the
reference dumps it (the service stores dumped rows).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import Field, TypeAdapter, ValidationError
from typing_extensions import TypedDict

from scheduler_core import Gpu, Worker, schedule
from scheduler_core._schemas import MAX_INT, GpuDevices

_Bytes = Annotated[int, Field(ge=0, le=MAX_INT)]


class _Memory(TypedDict, total=False):
    total: _Bytes
    used: _Bytes | None
    is_unified_memory: bool


class _Device(TypedDict, total=False):
    name: str | None
    vendor: str | None
    type: str | None
    index: _Bytes | None
    memory: _Memory | None


REFERENCE = TypeAdapter(list[_Device])
FAST = TypeAdapter(GpuDevices)

_ANY_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([2**63 - 1, 2**63, 85_899_345_920]),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from(["7", "x", "", "cuda", "1.5"]),
    st.just([]), st.just({}), st.just({"total": 1}),
)
_MEMORY = st.one_of(
    st.dictionaries(st.sampled_from(["total", "used", "is_unified_memory", "utilization_rate"]), _ANY_VALUE),
    _ANY_VALUE,
)
_DEVICE = st.one_of(
    st.dictionaries(
        st.sampled_from(["name", "vendor", "type", "index", "uuid", "core", "temperature"]), _ANY_VALUE
    ).flatmap(lambda row: st.one_of(st.just(row), _MEMORY.map(lambda memory: {**row, "memory": memory}))),
    _ANY_VALUE,
)


def _verdict(adapter: TypeAdapter[Any], rows: Any, from_json: bool) -> Any:
    try:
        value = adapter.validate_json(json.dumps(rows)) if from_json else adapter.validate_python(rows)
    except ValidationError as error:
        errors = error.errors(include_url=False)
        first = errors[0]
        return ("rejected", len(errors), first["loc"], first["type"], first["msg"])
    return ("accepted", value)


def _read(device: dict[str, Any]) -> Gpu:
    """What the core read of a reference row (``memory.total`` missing or no memory: 0)."""
    memory = device.get("memory") or {}
    return Gpu(
        device.get("type"), device.get("index"), memory.get("total") or 0, device.get("vendor"),
        device.get("name"), memory.get("used"), memory.get("is_unified_memory"),
    )


@settings(max_examples=400, deadline=None)
@given(rows=st.lists(_DEVICE, max_size=3), from_json=st.booleans())
def test_the_fast_schema_gives_the_reference_verdict(rows: list[Any], from_json: bool) -> None:
    reference = _verdict(REFERENCE, rows, from_json)
    fast = _verdict(FAST, rows, from_json)
    if reference[0] == "rejected":
        assert fast == reference
        return
    assert fast == ("accepted", tuple(_read(device) for device in reference[1]))
    assert all(type(gpu) is Gpu for gpu in fast[1])


def _reported(device: dict[str, Any]) -> bool:
    """A device that reports its memory size, as GPUStack's rows always do."""
    memory = device.get("memory")
    return isinstance(memory, dict) and isinstance(memory.get("total"), int)


def _complete(device: dict[str, Any]) -> bool:
    """A device with every key placement reads, as GPUStack writes them (``None`` or not)."""
    memory = device.get("memory")
    return (
        _reported(device)
        and {"name", "vendor", "type", "index"} <= device.keys()
        and {"used", "is_unified_memory"} <= memory.keys()
    )


_GPUSTACK_ROW = {
    "name": "H100", "vendor": "nvidia", "type": "cuda", "index": 0, "uuid": "GPU-0",
    "memory": {"total": 80, "used": None, "is_unified_memory": False, "utilization_rate": 1.5},
}


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(_DEVICE, max_size=3))
@example(rows=[_GPUSTACK_ROW, {**_GPUSTACK_ROW, "index": 1, "vendor": None}])
def test_a_row_dumps_as_the_reference_dumps_it(rows: list[Any]) -> None:
    """Stored rows are ``exclude_none`` JSON dumps: identical whenever the memory size is
    reported; otherwise (no memory, or no ``memory.total``) the dump reads back the same.
    A full dump is identical when every key is there (an absent key dumps as ``null``)."""
    try:
        reference = REFERENCE.validate_python(rows)
    except ValidationError:
        return
    gpus = FAST.validate_python(rows)
    dumped = FAST.dump_python(gpus, mode="json", exclude_none=True)
    assert FAST.validate_python(dumped) == gpus
    if all(_reported(device) for device in rows):
        assert dumped == REFERENCE.dump_python(reference, mode="json", exclude_none=True)
    if all(_complete(device) for device in rows):
        assert FAST.dump_json(gpus) == REFERENCE.dump_json(reference)


def test_a_worker_row_holds_its_gpus_and_dumps_unchanged() -> None:
    row = {
        "id": 1, "name": "w1", "state": "ready",
        "status": {
            "memory": {"total": 64, "is_unified_memory": False},
            "gpu_devices": [
                {"uuid": "GPU-1", "name": "H100", "vendor": "nvidia", "type": "cuda", "index": 0,
                 "core": {"total": 132}, "memory": {"total": 80, "used": 3, "is_unified_memory": False}},
                {"type": "rocm", "index": 0},
            ],
        },
    }
    worker = Worker.model_validate(row)
    assert worker.gpus == (Gpu("cuda", 0, 80, "nvidia", "H100", 3, False), Gpu("rocm", 0, 0))
    assert Worker.model_validate_json(worker.model_dump_json()) == worker
    stored = worker.model_dump(mode="json", exclude_none=True)
    assert stored["status"]["gpu_devices"] == [
        {"name": "H100", "vendor": "nvidia", "type": "cuda", "index": 0,
         "memory": {"total": 80, "used": 3, "is_unified_memory": False}},
        {"type": "rocm", "index": 0},
    ]
    assert Worker.model_validate({"id": 2, "name": "w2"}).gpus == ()


def test_a_memory_that_is_not_an_object_is_rejected_naming_it() -> None:
    row = {"id": 1, "name": "w1", "status": {"gpu_devices": [{"index": 0, "memory": "80GiB"}]}}
    result = schedule({"model": {"name": "m", "weight_bytes": 1}, "workers": [row]})
    assert result.status == "rejected"
    assert result.error is not None
    assert (result.error.field, result.error.message) == (
        "workers.0.status.gpu_devices.0.memory", "Input should be a valid dictionary"
    )
