"""The kept ranking (``scheduler_core.ranking.SlotRanking``) answers like a full list of scores.

A decider keeps one :class:`SlotRanking` per stage and inputs across decisions and
updates only the slots whose run is a new object. Whatever the updates, its pick,
its reported candidates and their scores must be what :class:`ListRanking` reads off
the joined scores (GPUStack's first highest, the best ``max_candidates`` with the
earliest ties), and decisions through it byte-identical to decisions without a memo.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_core import DEFAULT_CHAIN, ModelInstance, ScheduleRequest, SnapshotMemo, Worker, schedule
from scheduler_core.ranking import ListRanking, SlotRanking
from scheduler_core.scoring import pick_highest
from tests.builders import H100, gpu, model, weight_for_estimate, worker

#: Few distinct scores, as spread gives (many ties).
SCORES = (10.0, 55.5, 55.5, 70.25, 85.0, 100.0)


def _run(rng: random.Random) -> tuple[object, ...]:
    """A run of 0-4 distinct objects (the ranking reads runs only for their length and identity)."""
    return tuple(object() for _ in range(rng.choice([0, 0, 1, 1, 2, 4])))


def _check(ranking: SlotRanking, scores: dict[int, list[float]], slots: list[Any], limit: int | None) -> None:
    flat = [score for position in range(len(slots)) for score in scores.get(position, [])]
    expected = ListRanking(flat, pick_highest(flat))
    chosen = ranking.best()
    assert chosen == expected.best()
    shown = ranking.shown(limit, chosen)
    assert shown == expected.shown(limit, chosen)
    assert [ranking.score(position) for position in shown] == [flat[position] for position in shown]
    assert ranking.size == len(flat)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1), limit=st.sampled_from([None, 1, 3, 16]))
def test_kept_ranking_answers_like_the_joined_scores(seed: int, limit: int | None) -> None:
    rng = random.Random(seed)
    slots: list[Any] = [_run(rng) for _ in range(rng.randint(1, 30))]
    scores: dict[int, list[float]] = {}

    def scores_of(position: int, run: Any) -> list[float]:
        scores[position] = [rng.choice(SCORES) for _ in run]
        return scores[position]

    for position, run in enumerate(slots):
        scores_of(position, run)
    ranking = SlotRanking(slots, [score for position in range(len(slots)) for score in scores[position]])
    _check(ranking, scores, slots, limit)
    for _ in range(12):
        fresh = list(slots)
        for position in rng.sample(range(len(slots)), rng.randint(0, min(4, len(slots)))):
            fresh[position] = _run(rng)
            scores.pop(position, None)
        changed = ranking.changed(fresh)
        assert changed == [p for p in range(len(slots)) if fresh[p] is not slots[p]]
        ranking.update(fresh, changed, scores_of)
        slots = fresh
        _check(ranking, scores, slots, limit)


def _fleet(count: int) -> list[Worker]:
    rows = [worker(i, f"w{i}", [gpu(j, H100) for j in range(8)]) for i in range(1, count + 1)]
    return [Worker.model_validate(row) for row in rows]


def _instance(number: int, result: Any, model_id: int) -> ModelInstance:
    chosen = result.candidates[result.selected]
    return ModelInstance.model_validate({
        "id": 10_000 + number, "name": f"booked-{number}", "model_id": model_id,
        "worker_id": chosen.worker_id, "gpu_type": chosen.gpu_type, "gpu_indexes": chosen.gpu_indexes,
        "computed_resource_claim": chosen.computed_resource_claim.model_dump(),
    })


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_decisions_through_kept_rankings_match_fresh_decisions(seed: int) -> None:
    """A homogeneous fleet filling up and emptying again: one- and several-GPU spread models
    (new ones, and replicas of a few: the kept ranking with the holders' slots scored over
    it), bookings and releases move the range of the workers' totals up and down; every
    decision equals the same decision without a memo."""
    rng = random.Random(seed)
    workers = _fleet(rng.randint(3, 24))
    placed: list[ModelInstance] = []
    memo = SnapshotMemo()
    chain = replace(DEFAULT_CHAIN, max_candidates=rng.choice([1, 3, 16]))
    for step in range(40):
        tp = rng.choice([1, 1, 2, 4])
        replica = rng.random() < 0.4
        row = model(
            id=rng.choice([7, 8]) if replica else 1_000 + step, name=f"m{step}",
            backend_parameters=[] if tp == 1 else ["--tp-size", str(tp)],
            weight_bytes=weight_for_estimate(rng.choice([6, 14, 30])),
        )
        row["hf_config"] = {**row["hf_config"], "num_attention_heads": 32, "num_key_value_heads": 8}
        request = ScheduleRequest.model_validate({"request_id": f"r{step}", "model": row}).model_copy(
            update={"workers": workers, "model_instances": list(placed)}
        )
        remembered = schedule(request, memo=memo, chain=chain)
        assert remembered.model_dump_json() == schedule(request, chain=chain).model_dump_json(), step
        if remembered.status == "scheduled":
            placed.append(_instance(step, remembered, row["id"]))
        if placed and rng.random() < 0.3:
            placed.pop(rng.randrange(len(placed)))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_kept_stages_and_rankings_on_a_mixed_fleet_match_fresh_decisions(seed: int) -> None:
    """Two GPU types (a stage walks each type's workers with the tracker the first left),
    bookings and releases on both, a few models asked again and again, so that the stages'
    kept failing positions and record breakers and the rankings' slots follow many patches:
    every decision equals the same decision without a memo."""
    from tests.engine.test_snapshot_memo import _worker_row

    rng = random.Random(seed)
    workers = [Worker.model_validate(_worker_row(rng, i)) for i in range(1, rng.randint(6, 16))]
    shapes = [(rng.choice([1, 2, 4]), rng.choice([6, 14, 30, 70])) for _ in range(3)]
    placed: list[ModelInstance] = []
    memo = SnapshotMemo()
    chain = replace(DEFAULT_CHAIN, max_candidates=rng.choice([1, 3, 16]))
    for step in range(40):
        tp, size = rng.choice(shapes)
        row = model(
            id=rng.choice([7, 8, 2_000 + step]), name=f"m{step}", weight_bytes=weight_for_estimate(size),
            backend_parameters=[] if tp == 1 else ["--tp-size", str(tp)],
        )
        row["hf_config"] = {**row["hf_config"], "num_attention_heads": 32, "num_key_value_heads": 8}
        request = ScheduleRequest.model_validate({"request_id": f"r{step}", "model": row}).model_copy(
            update={"workers": workers, "model_instances": list(placed)}
        )
        remembered = schedule(request, memo=memo, chain=chain)
        assert remembered.model_dump_json() == schedule(request, chain=chain).model_dump_json(), step
        if remembered.status == "scheduled":
            placed.append(_instance(step, remembered, row["id"]))
        if placed and rng.random() < 0.35:
            placed.pop(rng.randrange(len(placed)))


def test_a_replica_whose_holder_sets_the_range_is_ranked_from_kept_scores() -> None:
    """Model 7 runs on the one worker with the most instances, so the other workers' counts
    span another range than every worker's: the replica's other candidates are scored with
    that range. Decided twice more with a booking in between, the decisions come from kept
    standings (no candidate scored in full after the first) and equal fresh decisions."""
    from unittest import mock

    from scheduler_core import scoring

    workers = _fleet(6)
    placed = [  # worker 1: model 7 and two others (total 3); workers 2-6: one other each
        ModelInstance.model_validate({
            "id": number, "name": f"i{number}", "model_id": model_id, "worker_id": worker_id,
            "gpu_type": "cuda", "gpu_indexes": [gpu_index],
        })
        for number, (model_id, worker_id, gpu_index) in enumerate(
            [(7, 1, 0), (50, 1, 1), (51, 1, 2), *((60 + w, w, 0) for w in range(2, 7))], start=1
        )
    ]
    memo = SnapshotMemo()
    chain = replace(DEFAULT_CHAIN, max_candidates=16)
    row = model(id=7, name="seven", weight_bytes=weight_for_estimate(6))
    full = mock.patch.object(scoring, "score_candidates", wraps=scoring.score_candidates)
    for step in range(3):
        request = ScheduleRequest.model_validate({"request_id": f"r{step}", "model": row}).model_copy(
            update={"workers": workers, "model_instances": tuple(placed)}
        )
        with full as scored:
            remembered = schedule(request, memo=memo, chain=chain)
        if step:
            assert scored.call_count == 0, step
        assert remembered.status == "scheduled"
        assert remembered.candidates[remembered.selected].worker_id != 1  # spread: not the holder
        assert remembered.model_dump_json() == schedule(request, chain=chain).model_dump_json(), step
        # worker 1 (total 3, other 2) sets the range: without it the others span (1, 2) here,
        # not (1, 3) — the case the kept ranking of every worker's totals cannot answer
        placed.append(_instance(step, remembered, 100 + step))
