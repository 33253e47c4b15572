"""``computed_resource_claim`` and ``system_reserved`` validated straight into named tuples.

The reference is pydantic itself validating the same objects as the plain models the
rows declared before (``_Row`` models with the same fields and legacy key names). For
any value, Python or JSON, the fast schema must accept exactly what the reference
accepts, reject with the same errors (location, type, message) except that a value
that is not an object is "a valid dictionary" rather than "a valid dictionary or
instance of" the model, read the same values, and dump as the reference dumps (the
service stores ``exclude_none`` dumps of the rows, and the full dump is the row's JSON).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from scheduler_core import ModelInstance, Worker
from scheduler_core._schemas import (
    Bytes,
    ClaimField,
    ComputedResourceClaim,
    Id,
    ReservedField,
    SystemReserved,
)


class _Row(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class _Claim(_Row):
    vram: dict[Id, Bytes] | None = None
    ram: Bytes | None = None
    vram_utilization: float | None = None
    estimated_vram: Bytes | None = None
    is_unified_memory: bool | None = None


class _Reserved(_Row):
    ram: Bytes = Field(default=0, validation_alias=AliasChoices("ram", "memory"))
    vram: Bytes = Field(default=0, validation_alias=AliasChoices("vram", "gpu_memory"))


_ANY_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([2**63 - 1, 2**63, 85_899_345_920]),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from(["7", "x", "", "0.8", "true"]),
    st.just([]), st.just({}), st.just({"0": 1}),
)
_INDEXES = st.sampled_from(["0", "1", "x", "-1", "7"])
_VRAM = st.one_of(st.dictionaries(_INDEXES, _ANY_VALUE, max_size=3), _ANY_VALUE)
_CLAIM = st.one_of(
    st.fixed_dictionaries(
        {}, optional={
            "vram": _VRAM, "ram": _ANY_VALUE, "vram_utilization": _ANY_VALUE,
            "estimated_vram": _ANY_VALUE, "is_unified_memory": _ANY_VALUE, "other": _ANY_VALUE,
        },
    ),
    _ANY_VALUE,
)
_RESERVED = st.one_of(
    st.dictionaries(st.sampled_from(["ram", "memory", "vram", "gpu_memory", "other"]), _ANY_VALUE),
    _ANY_VALUE,
)

_PAIRS = {
    "claim": (TypeAdapter(_Claim | None), TypeAdapter(ClaimField | None)),
    "reserved": (TypeAdapter(_Reserved | None), TypeAdapter(ReservedField | None)),
}


def _verdict(adapter: TypeAdapter[Any], value: Any, from_json: bool) -> Any:
    try:
        parsed = adapter.validate_json(json.dumps(value)) if from_json else adapter.validate_python(value)
    except ValidationError as error:
        errors = [(e["loc"], e["type"], e["msg"]) for e in error.errors(include_url=False)]
        return ("rejected", errors)
    return ("accepted", parsed)


def _as_reference(errors: list[tuple[Any, str, str]], name: str) -> list[tuple[Any, str, str]]:
    """The fast schema's errors as the reference words them: a value that is not an object
    is ``model_type`` there (from Python, "... or instance of" the model), ``dict_type`` here."""
    model = {"claim": "_Claim", "reserved": "_Reserved"}[name]
    worded = {
        "Input should be a valid dictionary": f"Input should be a valid dictionary or instance of {model}",
        "Input should be an object": "Input should be an object",
    }
    return [
        (loc, "model_type", worded[message]) if kind == "dict_type" and loc == () else (loc, kind, message)
        for loc, kind, message in errors
    ]


def _fields(model: BaseModel | None) -> tuple[Any, ...] | None:
    return None if model is None else tuple(model.model_dump().values())


@settings(max_examples=400, deadline=None)
@given(value=_CLAIM, from_json=st.booleans())
@example(value={"vram": {"0": 5, "1": 6}, "ram": 0, "vram_utilization": 0.8}, from_json=False)
def test_a_claim_gets_the_reference_verdict(value: Any, from_json: bool) -> None:
    _same_verdict("claim", value, from_json)


@settings(max_examples=300, deadline=None)
@given(value=_RESERVED, from_json=st.booleans())
@example(value={"memory": 2, "gpu_memory": 3}, from_json=True)
@example(value={"ram": 1, "memory": 2}, from_json=False)
def test_a_reserve_gets_the_reference_verdict(value: Any, from_json: bool) -> None:
    _same_verdict("reserved", value, from_json)


def _same_verdict(name: str, value: Any, from_json: bool) -> None:
    reference_adapter, fast_adapter = _PAIRS[name]
    reference = _verdict(reference_adapter, value, from_json)
    fast = _verdict(fast_adapter, value, from_json)
    if reference[0] == "rejected":
        assert fast[0] == "rejected"
        assert _as_reference(fast[1], name) == reference[1]
        return
    assert fast[0] == "accepted"
    assert (None if fast[1] is None else tuple(fast[1])) == _fields(reference[1])
    assert fast[1] is None or type(fast[1]) in (ComputedResourceClaim, SystemReserved)
    dumps = (
        (mode, exclude_none) for mode in ("python", "json") for exclude_none in (False, True)
    )
    for mode, exclude_none in dumps:
        assert fast_adapter.dump_python(fast[1], mode=mode, exclude_none=exclude_none) == (
            reference_adapter.dump_python(reference[1], mode=mode, exclude_none=exclude_none)
        )
    assert fast_adapter.dump_json(fast[1]) == reference_adapter.dump_json(reference[1])


def test_rows_read_and_store_their_claims_and_reserves_as_before() -> None:
    """The stored row JSON of an instance and a worker, byte for byte as the plain models
    dumped them, and what the ledger reads of them."""
    instance = ModelInstance.model_validate({
        "id": 7, "worker_id": 3, "gpu_type": "cuda", "gpu_indexes": [1, 0],
        "computed_resource_claim": {"vram": {"1": 40, "0": 41}, "ram": 5, "vram_utilization": 0.5, "x": 1},
        "distributed_servers": {"subordinate_workers": [
            {"worker_id": 4, "gpu_indexes": [0], "computed_resource_claim": {"vram": {"0": 9}}},
        ]},
    })
    claim = instance.computed_resource_claim
    assert claim == ComputedResourceClaim(vram={1: 40, 0: 41}, ram=5, vram_utilization=0.5)
    assert instance.model_dump(mode="json", exclude_none=True) == {
        "id": 7, "worker_id": 3, "gpu_type": "cuda", "gpu_indexes": [1, 0],
        "computed_resource_claim": {"vram": {"1": 40, "0": 41}, "ram": 5, "vram_utilization": 0.5},
        "distributed_servers": {"subordinate_workers": [
            {"worker_id": 4, "gpu_indexes": [0], "computed_resource_claim": {"vram": {"0": 9}}},
        ]},
    }
    assert ModelInstance.model_validate_json(instance.model_dump_json()) == instance
    worker = Worker.model_validate({"id": 1, "name": "w", "system_reserved": {"memory": 2, "gpu_memory": 3}})
    assert worker.system_reserved == SystemReserved(ram=2, vram=3)
    assert worker.model_dump(mode="json", exclude_none=True) == {
        "id": 1, "name": "w", "labels": {}, "state": "not_ready", "system_reserved": {"ram": 2, "vram": 3},
    }
