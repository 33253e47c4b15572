"""``policy: precise``'s wake answer: the least allocatable bytes a GPU needs to join a candidate.

Checked two ways: by hand on the rule's inputs (SGLang's context plus a quarter of the
weights split over the most ranks), and against the precise strategies themselves — no GPU of any
candidate they return ever has less allocatable memory than the floor, so freed
capacity below it can never unblock the request (issue 17, item 8).
"""

from __future__ import annotations

import itertools

import pytest
from builders import GIB, H100, RTX_4090, instance, model, request, uniform_worker

from scheduler_core import DEFAULT_CHAIN, Chain, PreciseSettings, ScheduleResult, Worker, schedule, wake_floor
from scheduler_core.plugins import PRECISE_CHAIN
from scheduler_core.wake import ANY_GPU

#: Qwen2.5-7B's checkpoint (the builders' default model carries these weights).
WEIGHTS = 15_231_233_024
CONTEXT = PreciseSettings().sglang_context


def _parked(params: list[str], workers: list[dict[str, object]], **model_fields: object):
    row = model(backend_parameters=params, weight_bytes=WEIGHTS, **model_fields)
    result = schedule(request(row, workers, policy="precise"))
    rows = [Worker.model_validate(w) for w in workers]
    return row, result, rows


@pytest.mark.parametrize(
    ("params", "across", "ranks"),
    [
        (["--tp-size", "2"], None, 2),  # a world size: the user's tp × pp
        (["--tp-size", "2", "--pp-size", "2"], None, 4),
        (["--dp-size", "2"], None, 1),  # dp replicas each hold a full copy
        ([], False, 4),  # automatic, one worker: at most its 4 GPUs
        ([], None, 8),  # automatic across workers: 2 nodes × 4 GPUs
    ],
)
def test_the_floor_is_the_context_plus_a_quarter_of_the_weights_per_rank(params, across, ranks) -> None:
    workers = [uniform_worker(1, "a", 4, 4 * GIB), uniform_worker(2, "b", 2, 4 * GIB)]
    row, result, rows = _parked(params, workers, distributed_inference_across_workers=across)
    assert result.status == "unschedulable"
    floor = free_bytes_floor(row, result, PRECISE_CHAIN, rows)
    assert floor == CONTEXT + -(-WEIGHTS // (4 * ranks))
    gpustack = schedule(request(row, workers))  # another policy's result: no floor in bytes
    assert free_bytes_floor(row, gpustack, DEFAULT_CHAIN, rows) is None


def free_bytes_floor(row, result: ScheduleResult, chain: Chain, rows: list[Worker]) -> int | None:
    """The bytes part of the chain's wake floor for the decision that parked ``row``."""
    return wake_floor(model_of(row), result, chain, rows).least_bytes


def model_of(row: dict[str, object]):
    from scheduler_core import ModelSpec

    return ModelSpec.model_validate(row)


def test_no_floor_for_a_manual_selection_or_a_rejection() -> None:
    workers = [uniform_worker(1, "a", 2, RTX_4090)]
    manual = model(gpu_selector={"gpu_ids": ["a:cuda:0"]})
    result = schedule(request(manual, workers, policy="precise"))
    assert wake_floor(model_of(manual), result, PRECISE_CHAIN, []) == ANY_GPU
    bad = schedule(request(model(), workers, policy="precise", min_context_tokens=0))
    assert bad.status == "rejected" and wake_floor(model_of(model()), bad, PRECISE_CHAIN, []) == ANY_GPU


def test_no_candidate_of_the_precise_strategies_uses_a_gpu_below_the_floor() -> None:
    """The floor is a true lower bound: the strategies' own candidates, over GPUs partly held by
    other instances, never include a GPU with less allocatable memory than it."""
    workers = [uniform_worker(1, "rtx", 2, RTX_4090), uniform_worker(2, "h100", 2, H100)]
    rows = [Worker.model_validate(w) for w in workers]
    checked = 0
    for held, params in itertools.product((0, 6, 12, 19), ([], ["--tp-size", "2"])):
        instances = [instance(9, 1, {0: held * GIB}), instance(8, 2, {1: 4 * held * GIB})]
        row = model(backend_parameters=params, weight_bytes=WEIGHTS)
        result = schedule(request(row, workers, instances, policy="precise"))
        floor = free_bytes_floor(row, result, PRECISE_CHAIN, rows)
        assert floor is not None
        free = {(1, 0): RTX_4090 - held * GIB, (1, 1): RTX_4090, (2, 0): H100, (2, 1): H100 - 4 * held * GIB}
        for candidate in result.candidates:
            for index in candidate.gpu_indexes:
                assert free[(candidate.worker_id, index)] >= floor, (held, params, candidate.worker_id, index)
                checked += 1
    assert checked >= 10  # the bound was held against real candidates
