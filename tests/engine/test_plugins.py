"""The wake rules a chain implies: GPUStack's stages' wake floor (in shares) bounds where freed GPUs help."""

from __future__ import annotations

import math

from builders import RTX_4090, instance, model, request, uniform_worker

from scheduler_core import DEFAULT_CHAIN, ScheduleRequest, ScheduleResult, Worker, schedule, wake_floor


def free_share_floor(raw: dict[str, object], result: ScheduleResult) -> dict[str, float] | None:
    """The share part of the chain's wake floor for the decision of ``raw``."""
    parsed = ScheduleRequest.model_validate(raw)
    workers: list[Worker] = list(parsed.workers or ())
    shares = wake_floor(parsed.model, result, DEFAULT_CHAIN, workers).shares
    return None if shares is None else dict(shares)


def _decide(held: int, tp: int = 1, **fields: object) -> tuple[ScheduleRequest, float | None, str]:
    """Decide a tp-``tp`` model on one host of two RTX 4090s whose GPU 0 has ``held`` bytes
    claimed and GPU 1 is full; returns the request, the floor of cuda and the status."""
    params = ["--tp-size", str(tp)] if tp > 1 else []
    row = model(backend_parameters=params, **fields)
    claims = [instance(1, 1, {0: held}), instance(2, 1, {1: RTX_4090})]
    raw = request(row, [uniform_worker(1, "a", 2, RTX_4090)], claims)
    result = schedule(raw)
    floor = free_share_floor(raw, result)
    return ScheduleRequest.model_validate(raw), (floor or {}).get("cuda"), result.status


def test_a_gpu_below_the_floor_holds_no_candidate_and_one_at_it_does() -> None:
    _, floor, status = _decide(RTX_4090)  # GPU 0 full: unschedulable, the floor is the fraction
    assert status == "unschedulable" and floor is not None and 0 < floor < 1
    at_floor = RTX_4090 - math.ceil(floor * RTX_4090)  # leaves a share of exactly >= floor
    assert _decide(at_floor)[2] == "scheduled"
    below = at_floor + RTX_4090 // 100  # one percent of the GPU less
    assert _decide(below)[2] == "unschedulable"


def test_the_floor_is_the_estimates_fraction_per_type() -> None:
    raw = request(model(), [uniform_worker(1, "a", 1, RTX_4090)], [instance(1, 1, {0: RTX_4090})])
    result = schedule(raw)
    assert result.estimate is not None
    assert free_share_floor(raw, result) == result.estimate.mem_fraction_static


def test_no_floor_where_the_rules_give_none() -> None:
    workers = [uniform_worker(1, "a", 1, RTX_4090)]
    full = [instance(1, 1, {0: RTX_4090})]
    manual = model(gpu_selector={"gpu_ids": ["a:cuda:0"]})
    raw = request(manual, workers, full)
    assert free_share_floor(raw, schedule(raw)) is None
    precise = request(model(), workers, full, policy="precise")
    assert free_share_floor(precise, schedule(precise)) is None
    bad = request(model(backend_parameters=["--tp-size", "3"]), workers)  # 28 heads
    rejected = schedule(bad)
    assert rejected.status == "rejected"
    assert free_share_floor(bad, rejected) is None
