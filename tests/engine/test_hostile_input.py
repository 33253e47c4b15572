"""Hostile and malformed input never raises out of ``schedule()`` / ``tune()`` (issue 10, item 3-4).

Each case was an ``internal_error`` or an exception before: the result is now a
``rejected`` decision whose error names the field, and it serialises.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from typing import Any

import pytest
from builders import GIB, H100, gpu, model, request, worker

from scheduler_core import UNHASHABLE_REQUEST_ID, schedule, tune


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"x": value}
    return value


def _rejected(raw: dict[str, Any]) -> tuple[str | None, str]:
    result = schedule(raw)
    json.loads(result.model_dump_json())  # always serialisable
    assert result.status == "rejected", result
    assert result.error is not None and result.error.code != "internal_error", result.error
    return result.error.field, result.error.message


def test_deeply_nested_request_without_id_is_rejected_not_raised():
    """A request nested ~1,000 levels deep and without request_id used to raise RecursionError
    while hashing it into an id."""
    raw = request(model(), [worker(1, "w", [gpu(0, H100)])])
    del raw["request_id"]
    raw["annotations"] = _nested(1000)
    assert _rejected(raw) == ("annotations", "nests more than 64 levels deep")


def _deep_without_id(where: str, depth: int = 100) -> dict[str, Any]:
    raw = request(model(), [worker(1, "w", [gpu(0, H100)])])
    del raw["request_id"]
    if where == "model.hf_config":
        raw["model"]["hf_config"] = {**raw["model"]["hf_config"], "extra": _nested(depth)}
    elif where == "model.env":
        raw["model"]["env"] = {"A": _nested(depth)}
    else:
        raw[where] = _nested(depth)
    return raw


def _json_digest_id(raw: dict[str, Any]) -> str:
    """docs/service.md's rule, written with the standard library (100 levels is within its reach)."""
    text = json.dumps(raw, sort_keys=True, separators=(",", ":"))
    return "req-" + hashlib.sha256(text.encode()).hexdigest()[:24]


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("model.hf_config",
         "Failed to parse model qwen2.5-7b hyperparameters: nests more than 64 levels deep"),
        ("model.env", "nests more than 64 levels deep"),
        ("annotations", "nests more than 64 levels deep"),
    ],
)
def test_deep_request_without_id_gets_its_digest_id_and_its_field(where, message):
    """Every too-deep id-less request used to share the id ``req-unhashable`` and the field
    ``request``: it now has the id its content gives (docs/service.md) and names its field."""
    raw = _deep_without_id(where)
    result = schedule(copy.deepcopy(raw))
    assert result.request_id == _json_digest_id(raw)
    assert (result.status, result.error.field, result.error.message) == ("rejected", where, message)
    assert schedule(copy.deepcopy(raw)).model_dump_json() == result.model_dump_json()


def test_different_deep_requests_without_id_get_different_ids():
    ids = {schedule(_deep_without_id(where, 1000)).request_id
           for where in ("model.hf_config", "model.env", "annotations")}
    ids.add(schedule(_deep_without_id("annotations", 1001)).request_id)
    assert len(ids) == 4 and all(len(i) == 28 and i.startswith("req-") for i in ids), ids


def test_a_request_that_contains_itself_is_rejected_under_the_fixed_id():
    """Only a Python caller can build one (JSON cannot): it has no content digest."""
    raw = request(model(), [worker(1, "w", [gpu(0, H100)])])
    del raw["request_id"]
    raw["annotations"] = [raw]
    result = schedule(raw)
    assert (result.request_id, result.status) == (UNHASHABLE_REQUEST_ID, "rejected")
    assert result.error.field == "request"


def test_deep_field_is_named_the_same_with_or_without_an_id():
    raw = _deep_without_id("model.env")
    with_id = schedule({**raw, "request_id": "r-deep"})
    assert (with_id.request_id, with_id.error.field) == ("r-deep", "model.env")
    shallow = _deep_without_id("annotations", 63)  # 64 levels: the bound, accepted
    assert schedule(shallow).status == "scheduled"


def test_deeply_nested_hf_config_is_rejected_with_the_field():
    row = model(hf_config={**model()["hf_config"], "extra": _nested(200)})
    assert _rejected(request(row, [worker(1, "w", [gpu(0, H100)])])) == (
        "model.hf_config",
        "Failed to parse model qwen2.5-7b hyperparameters: nests more than 64 levels deep",
    )


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r["model"].update(name="qwen\ud800"), "model.name"),
        (lambda r: r["model"].update(backend_parameters=["--served-model-name", "a\udfffb"]),
         "model.backend_parameters.1"),
        (lambda r: r["workers"][0].update(name="node\ud800"), "workers.0.name"),
        (lambda r: r["workers"][0]["status"]["gpu_devices"][0].update(type="cu\ud800da"),
         "workers.0.status.gpu_devices.0.type"),
    ],
)
def test_lone_surrogates_are_rejected_with_the_field(mutate, field):
    """A lone surrogate is legal JSON but not Unicode: the result could not be serialised."""
    raw = copy.deepcopy(request(model(), [worker(1, "w", [gpu(0, H100)])]))
    mutate(raw)
    got_field, message = _rejected(raw)
    assert (got_field, message) == (field, "is not valid Unicode (it holds a lone surrogate)")


def test_a_lone_surrogate_in_an_instance_name_is_named_past_non_ascii_names():
    """Instance names are checked at C speed when all are ASCII; a non-ASCII name sends the check
    through every name, which still accepts valid Unicode and names the first bad one."""
    raw = request(model(), [worker(1, "w", [gpu(0, H100)])])
    raw["model_instances"] = [
        {"id": 1, "name": "模型-1", "worker_id": 1, "gpu_indexes": [0],
         "computed_resource_claim": {"vram": {"0": GIB}}},
        {"id": 2, "name": None, "worker_id": 1},
    ]
    assert schedule(raw).status == "scheduled"
    raw["model_instances"].append({"id": 3, "name": "bad\ud800", "worker_id": 1})
    assert _rejected(raw) == ("model_instances.2.name", "is not valid Unicode (it holds a lone surrogate)")


def test_lone_surrogate_in_request_id_is_rejected():
    """The id itself is not usable: the rejection carries a derived id and names the field."""
    raw = request(model(), [worker(1, "w", [gpu(0, H100)])])
    raw["request_id"] = "bad\ud800id"
    result = schedule(raw)
    json.loads(result.model_dump_json())
    assert (result.status, result.error.field) == ("rejected", "request_id")
    assert result.request_id.startswith("req-")


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r["model"].update(weight_bytes=10**400), "model.weight_bytes"),
        (lambda r: r["workers"][0]["status"]["gpu_devices"][0]["memory"].update(total=10**400),
         "workers.0.status.gpu_devices.0.memory.total"),
        (lambda r: r["workers"][0]["system_reserved"].update(vram=-1), "workers.0.system_reserved.vram"),
        (lambda r: r["model"]["hf_config"].update(num_attention_heads=10**400),
         "model.hf_config.num_attention_heads"),
    ],
)
def test_numbers_past_range_are_rejected_with_the_field(mutate, field):
    """Byte counts and ids fit a signed 64-bit integer; 10**400 used to overflow float maths."""
    raw = copy.deepcopy(request(model(), [worker(1, "w", [gpu(0, H100)])]))
    mutate(raw)
    assert _rejected(raw)[0] == field


def test_string_in_vision_config_names_the_field():
    config = {
        **model()["hf_config"],
        "model_type": "qwen2_vl",
        "vision_config": {"depth": "thirty-two", "hidden_size": 1280},
    }
    field, message = _rejected(request(model(hf_config=config), [worker(1, "w", [gpu(0, H100)])]))
    assert field == "model.hf_config.vision_config.depth"
    assert message.endswith("expected an integer, got 'thirty-two'")


@pytest.mark.parametrize("flag", ["--tp-size", "--chunked-prefill-size", "--cuda-graph-max-bs"])
def test_huge_size_flags_are_rejected(flag):
    """tp 10**18 used to overflow the fraction calculator's float arithmetic."""
    row = model(backend_parameters=[flag, str(10**18)])
    assert _rejected(request(row, [worker(1, "w", [gpu(0, H100)])])) == (
        "model.backend_parameters",
        f"{flag} is out of range (at most 1048576).",
    )


def test_infinite_fraction_is_rejected():
    row = model(backend_parameters=["--mem-fraction-static", "1e400"])
    assert _rejected(request(row, [worker(1, "w", [gpu(0, H100)])])) == (
        "model.backend_parameters",
        "--mem-fraction-static must be a finite number.",
    )


def test_tune_bounds_the_gpu_count():
    """tune() was linear in num_gpus with no bound (2·10¹³ GPUs never finished)."""
    request_ = {
        "explicit_args": {"num_gpus": 2 * 10**13},
        "platform": {"kind": "cuda", "device_total_memory_gib": 80},
        "pipeline": {"pipeline_config_class": "QwenImagePipelineConfig", "task_type": "T2I"},
    }
    start = time.perf_counter()
    with pytest.raises(ValueError, match="num_gpus"):
        tune(request_)
    assert time.perf_counter() - start < 5  # refused up front, not after the linear work
    request_["explicit_args"] = {"num_gpus": 2}
    request_["platform"]["available_memory_gib_by_device"] = {"0": 80, "1": 80}
    assert tune(request_).num_gpus == 2


def test_a_sane_request_still_schedules():
    assert schedule(request(model(), [worker(1, "w", [gpu(0, H100)])])).status == "scheduled"
    assert GIB > 0


@pytest.mark.parametrize(
    ("field", "value", "limit"),
    [
        ("model.name", "n" * 1025, 1024),
        ("model.huggingface_repo_id", "r" * 1025, 1024),
        ("model.local_path", "/" + "p" * 4096, 4096),
        ("model.backend_parameters.0", "--served-model-name=" + "s" * 65536, 65536),
    ],
)
def test_strings_a_result_can_echo_are_bounded_with_the_field(field: str, value: str, limit: int):
    """A 5 MB model name came back inside a 15 MB result ("Failed to parse model nnn…");
    each string that can reach a message or the launch line is bounded and named."""
    row = model()
    if field == "model.backend_parameters.0":
        row["backend_parameters"] = [value]
    else:
        row[field.split(".", 1)[1]] = value
    named, message = _rejected(request(row, [worker(1, "w", [gpu(0, H100)])]))
    assert (named, message) == (field, f"String should have at most {limit} characters")
    at_limit = {**row, "name": "n" * 1024} if field == "model.name" else None
    if at_limit is not None:  # the longest accepted
        assert schedule(request(at_limit, [worker(1, "w", [gpu(0, H100)])])).status == "scheduled"
