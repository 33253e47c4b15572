"""Property tests: schedule() never raises, rejects bad input with a field, and is deterministic."""

from __future__ import annotations

import copy
import json
from typing import Any

from builders import GIB, H100, RTX_4090, gpu, instance, model, request, uniform_worker, worker
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_core import schedule

JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
)
JSON = st.recursive(
    JSON_LEAVES,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def _valid_request() -> dict[str, Any]:
    workers = [
        uniform_worker(1, "a", 2, RTX_4090),
        worker(2, "mix", [gpu(0, H100), gpu(0, H100, type_="rocm", vendor="amd")]),
    ]
    busy = [instance(1, 1, {0: 4 * GIB}), instance(2, 2, {0: 60 * GIB}, gpu_type="rocm")]
    return request(model(backend_parameters=["--tp-size", "2"]), workers, busy)


VALID = _valid_request()


def _check(result) -> None:
    assert result.status in {"scheduled", "unschedulable", "rejected"}
    if result.status == "rejected":
        assert result.error is not None
        assert result.error.code != "internal_error", result.error
        assert result.error.field
        assert "\n" not in result.error.message
    json.loads(result.model_dump_json())


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_arbitrary_json_never_raises(value):
    """Invariant 4: arbitrary JSON comes back as a result, rejected with a field when invalid."""
    _check(schedule(value))


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    paths = [prefix]
    if isinstance(node, dict):
        for key, child in node.items():
            paths.extend(_paths(child, (*prefix, key)))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            paths.extend(_paths(child, (*prefix, index)))
    return paths


ALL_PATHS = _paths(VALID)[1:]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(ALL_PATHS), st.booleans(), JSON), min_size=1, max_size=3))
def test_mutated_valid_requests_never_raise(mutations):
    """Invariant 4 on near-valid input: replace or delete random fields of a valid request."""
    req = copy.deepcopy(VALID)
    for path, delete, value in mutations:
        parent: Any = req
        try:
            for key in path[:-1]:
                parent = parent[key]
            if delete and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    _check(schedule(req))


@settings(max_examples=50, deadline=None)
@given(st.permutations(range(3)))
def test_same_input_same_bytes(order):
    """Invariant 1: the same request gives a byte-identical result (and request ids are stable)."""
    req = _valid_request()
    req.pop("request_id")
    req["model"]["backend_parameters"] = []
    req["workers"].append(uniform_worker(3, "c", 1, RTX_4090))
    first = schedule(copy.deepcopy(req)).model_dump_json()
    assert schedule(copy.deepcopy(req)).model_dump_json() == first
    # dict key order of the input does not matter
    shuffled = {key: req[key] for key in [list(req)[i] for i in order]}
    assert schedule(shuffled).model_dump_json() == first
