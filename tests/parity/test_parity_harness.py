"""The parity harness itself (no oracle): generator, argument forms, comparison, excuses, shrinker."""

from __future__ import annotations

import copy
import random
from collections import Counter
from typing import Any

import pytest

from tests.parity import argforms
from tests.parity.check import classify
from tests.parity.compare import comparable, differences
from tests.parity.excuses import argv, excuse, exhibited, oracle_gap, parameter
from tests.parity.generator import generate, scenario
from tests.parity.shrink import shrink

GIB = 1 << 30


# --------------------------------------------------------------------------- generator


def test_a_scenario_is_a_pure_function_of_seed_and_index() -> None:
    assert scenario(3, 41) == scenario(3, 41)
    assert [s.id for s in generate(3, 3)] == ["3-0", "3-1", "3-2"]
    assert scenario(3, 41).request != scenario(4, 41).request


def _claims_per_gpu(request: dict[str, Any]) -> Counter[tuple[int, str]]:
    used: Counter[tuple[int, str]] = Counter()
    for instance in request["model_instances"]:
        claim = instance["computed_resource_claim"] or {"vram": {}}  # a pending replica holds nothing
        for index, vram in claim["vram"].items():
            used[(instance["worker_id"], index)] += vram
        for sub in (instance.get("distributed_servers") or {}).get("subordinate_workers") or []:
            for index, vram in sub["computed_resource_claim"]["vram"].items():
                used[(sub["worker_id"], index)] += vram
    return used


@pytest.mark.parametrize("index", range(60))
def test_generated_clusters_are_physically_possible(index: int) -> None:
    item = scenario(11, index)
    request = item.request
    totals = {
        (w["id"], str(g["index"])): g["memory"]["total"]
        for w in request["workers"]
        for g in w["status"]["gpu_devices"]
    }
    for key, used in _claims_per_gpu(request).items():
        if key[0] != 999:  # 999: a stale instance of a removed worker
            assert used <= totals[key], f"GPU {key} booked beyond its memory"
    names = {w["name"]: w for w in request["workers"]}
    for gpu_id in (request["model"].get("gpu_selector") or {}).get("gpu_ids") or []:
        worker, gpu_type, gpu_index = gpu_id.split(":")
        absent_allowed = worker == "retired-node" or "manual_absent_gpu" in item.tags
        assert absent_allowed or any(
            g["type"] == gpu_type and g["index"] == int(gpu_index)
            for g in names[worker]["status"]["gpu_devices"]
        )
    config = request["model"].get("hf_config")
    assert config is None or config["model_type"]


def test_most_scenarios_exercise_the_selector() -> None:
    """Realistic mix: model kinds and parameter forms all appear; manual selection is common."""
    tags = Counter(t for s in generate(5, 400) for t in s.tags)
    for workload in ("llm", "vlm", "embedding", "diffusion", "tts"):
        assert tags[f"workload:{workload}"] > 5, workload
    for form in argforms.FORMS:
        assert tags[f"params:{form}"] > 20, form
    assert tags["manual"] > 40
    assert tags["busy_cluster"] > 200


# --------------------------------------------------------------------------- argument forms


PAIRS: list[argforms.Pair] = [
    ("--tp-size", "2"),
    ("--mem-fraction-static", "0.85"),
    ("--enable-dp-attention", None),
]


@pytest.mark.parametrize("form", argforms.FORMS)
def test_every_form_reads_back_as_written(form: str) -> None:
    params = argforms.render(PAIRS, form, random.Random(form))
    assert parameter(params, ("tp-size",)) == "2"
    assert parameter(params, ("mem-fraction-static",)) == "0.85"
    assert "--enable-dp-attention" in argv(params)


@pytest.mark.parametrize(
    ("params", "tp"),
    [
        (["--tp-size", "4"], "4"),
        (["--tp-size=4"], "4"),
        (["--tp-size 4"], "4"),
        (["  --tp-size  4 "], "4"),
        (["--tp-size 2 --pp-size 2"], "2"),
        (['--tp-size="2"'], "2"),
        (["--tp-size", "--tp-size=2"], "2"),
        (["--tp-size 2 \\\n  --pp-size 2 \\"], "2"),
        (["--tp-size", "-1"], "-1"),  # a negative number is a value
        (["-1 --tp-size 8"], None),  # an element starting with a value is one token
    ],
)
def test_the_trigger_tokeniser_reads_parameters_as_gpustack(params: list[str], tp: str | None) -> None:
    assert parameter(params, ("tp-size",)) == tp


# --------------------------------------------------------------------------- comparison


def _result(**overrides: Any) -> dict[str, Any]:
    claim = {"vram": {"0": 20 * GIB}, "ram": None, "vram_utilization": 0.85}
    result = {
        "status": "scheduled",
        "candidates": [
            {
                "worker_id": 1,
                "gpu_type": "cuda",
                "gpu_indexes": [0],
                "computed_resource_claim": claim,
                "overcommit": False,
                "score": 100.0,
                "subordinate_workers": None,
            }
        ],
        "selected": 0,
        "messages": [],
        "filter_messages": ["Matched 1 worker by cluster selector."],
        "state_message": None,
        "error": None,
    }
    result.update(overrides)
    return result


def test_identical_results_have_no_difference() -> None:
    assert differences(comparable(_result()), comparable(_result())) == []


def test_a_score_differing_below_the_sixth_decimal_is_equal() -> None:
    other = _result()
    other["candidates"][0]["score"] = 100.0000001
    assert differences(comparable(_result()), comparable(other)) == []


def test_claim_and_subordinate_differences_are_named() -> None:
    other = copy.deepcopy(_result())
    other["candidates"][0]["computed_resource_claim"]["vram_utilization"] = 0.84
    other["candidates"][0]["subordinate_workers"] = [
        {"worker_id": 2, "gpu_type": "cuda", "gpu_indexes": [0], "computed_resource_claim": None}
    ]
    assert differences(comparable(_result()), comparable(other)) == [
        "candidates[].subordinates.count",
        "candidates[].vram_utilization",
    ]


def test_missing_workers_are_compared_as_a_set() -> None:
    """GPUStack joins a set of names: its order follows the hash seed, not the request."""
    ours = _result(filter_messages=["Matched 1 worker by gpu selector. Missing workers: b, a."])
    theirs = _result(filter_messages=["Matched 1 worker by gpu selector. Missing workers: a, b."])
    assert differences(comparable(ours), comparable(theirs)) == []


def test_error_fields_count_only_when_both_name_one() -> None:
    ours = _result(
        status="rejected", candidates=[], selected=None, error={"message": "x", "field": "model.replicas"}
    )
    theirs = _result(status="rejected", candidates=[], selected=None, error={"message": "x", "field": None})
    assert differences(comparable(ours), comparable(theirs)) == []
    theirs["error"] = {"message": "y", "field": "model"}
    assert differences(comparable(ours), comparable(theirs)) == ["error.field", "error.message"]


# --------------------------------------------------------------------------- excuses


def _request(**model: Any) -> dict[str, Any]:
    worker = {
        "id": 1,
        "name": "w1",
        "state": "ready",
        "system_reserved": {"ram": 0, "vram": 0},
        "status": {
            "memory": {"total": 64 * GIB},
            "gpu_devices": [{"index": 0, "type": "cuda", "memory": {"total": 24 * GIB}}],
        },
    }
    return {
        "model": {"name": "m", "backend_parameters": [], **model},
        "workers": [worker],
        "model_instances": [],
    }


def test_a_crash_on_null_reserved_memory_is_excused_only_when_gpustack_crashed() -> None:
    request = _request()
    request["workers"][0]["system_reserved"] = None
    assert exhibited(request) == {"system_reserved_null"}
    crashed = _result(status="error", error={"type": "AttributeError", "message": "'NoneType' ..."})
    assert excuse(request, _result(), crashed) == "system_reserved_null"
    assert excuse(request, _result(), _result(status="unschedulable")) is None


def test_tp_size_zero_is_excused_only_when_we_reject_it() -> None:
    request = _request(backend_parameters=["--tp-size 0"])
    rejected = _result(status="rejected", error={"code": "invalid_request", "message": "...", "field": "x"})
    assert excuse(request, rejected, _result()) == "tp_size_zero"
    assert excuse(request, _result(selected=1), _result()) is None


def test_an_argument_error_is_excused_when_no_worker_passed_gpustacks_filters() -> None:
    request = _request(backend_parameters=["--tp-size 3"])
    rejected = _result(status="rejected", error={"message": "...", "field": "model.backend_parameters"})
    nothing = _result(status="unschedulable", candidates=[], selected=None)
    assert excuse(request, rejected, nothing) == "argument_error_before_filters"
    assert excuse(request, rejected, {**nothing, "estimate": {}}) is None


# --------------------------------------------------------------------------- shrinker


def test_the_shrinker_keeps_only_what_the_difference_needs() -> None:
    request = scenario(7, 3).request
    request["workers"] = request["workers"] or [_request()["workers"][0]]
    target = request["workers"][-1]["name"]

    def keep(candidate: dict[str, Any]) -> bool:
        return any(w["name"] == target for w in candidate["workers"])

    small = shrink(request, keep)
    assert [w["name"] for w in small["workers"]] == [target]
    assert small["model_instances"] == []
    assert small["model"]["backend_parameters"] == []
    assert len(small["workers"][0]["status"]["gpu_devices"]) == 1


def test_the_distributed_limit_gap_needs_a_selected_worker_in_a_distributed_instance() -> None:
    """The oracle never loads instance.model: GPUStack's one-distributed-instance rule cannot fire there."""
    request = _request(gpu_selector={"gpu_ids": ["w1:cuda:0", "w2:cuda:0"]})
    request["workers"].append(dict(request["workers"][0], id=2, name="w2"))
    assert oracle_gap(request, _result(), _result(selected=1)) is None
    request["model_instances"] = [
        {
            "worker_id": 3,
            "backend": "SGLang",
            "distributed_servers": {"subordinate_workers": [{"worker_id": 2}]},
        }
    ]
    assert oracle_gap(request, _result(), _result(selected=1)) == "distributed_limit"
    request["model"]["backend"] = None  # a null backend never matches an instance's (rule 2)
    assert oracle_gap(request, _result(), _result(selected=1)) is None


def test_a_difference_is_grouped_by_our_rejection_code_and_the_fields() -> None:
    request = _request()
    rejected = _result(
        status="rejected", candidates=[], selected=None, error={"code": "invalid_x", "message": "m"}
    )
    outcome = classify("1-1", (), request, rejected, _result())
    assert outcome.verdict == "differ"
    assert outcome.group == "[invalid_x] status rejected≠scheduled: candidates.count, selected, status"
