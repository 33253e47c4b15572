"""The cross-decision ``SnapshotMemo`` never changes a result.

A long-lived decider keeps one memo across decisions while the cluster moves
under it (bookings, deletions, worker rows replaced, workers leaving). Every
decision with the memo must be byte-identical to the same decision without
it. The random walks mix what the memo keys on: models (claims, fractions, tp
sizes, extended KV cache, spread/binpack, label selectors, manual selection),
GPU types (CUDA and ROCm, mixed workers), states and the worker list itself.
"""

from __future__ import annotations

import operator
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_core import DEFAULT_CHAIN, ModelInstance, ScheduleRequest, SnapshotMemo, Worker, schedule
from scheduler_core.memo import SlotKey
from tests.builders import (
    GIB,
    H100,
    MI300X,
    RTX_4090,
    first_gpu_selector,
    gpu,
    model,
    weight_for_estimate,
    worker,
)

TOTALS = {"cuda": (RTX_4090, H100, 48 * GIB), "rocm": (MI300X,)}


def _worker_row(rng: random.Random, worker_id: int) -> dict[str, Any]:
    kind = rng.choice(["cuda", "cuda", "rocm", "mixed"])
    count = rng.choice([1, 2, 4, 8])
    if kind == "mixed":
        gpus = [gpu(i, H100) for i in range(count)] + [
            gpu(i, MI300X, type_="rocm", vendor="amd") for i in range(2)
        ]
    else:
        total = rng.choice(TOTALS[kind])
        vendor = "amd" if kind == "rocm" else "nvidia"
        gpus = [gpu(i, total, type_=kind, vendor=vendor) for i in range(count)]
    return worker(
        worker_id, f"w{worker_id}", gpus,
        state=rng.choice(["ready"] * 5 + ["not_ready"]),
        labels={"rack": rng.choice(["a", "b"])},
        reserved_vram=rng.choice([0, 0, GIB]),
    )


def _model_row(rng: random.Random, workers: list[Worker]) -> dict[str, Any]:
    tp = rng.choice([None, 1, 2, 4, 8])
    params = [] if tp is None else ["--tp-size", str(tp)]
    if rng.random() < 0.15:
        params += ["--mem-fraction-static", "0.8"]
    row = model(
        id=rng.choice([1, 2, 3]),
        name=f"m{rng.randrange(3)}",
        backend_parameters=params,
        placement_strategy=rng.choice(["spread", "spread", "binpack"]),
        weight_bytes=weight_for_estimate(rng.choice([6, 14, 30, 70, 150])),
    )
    if rng.random() < 0.5:  # 32 heads divide every tp size; Qwen's 28 reject tp 8
        row["hf_config"] = {**row["hf_config"], "num_attention_heads": 32, "num_key_value_heads": 8}
    if rng.random() < 0.2:
        row["worker_selector"] = {"rack": rng.choice(["a", "b"])}
    if rng.random() < 0.15:
        row["extended_kv_cache"] = {"enabled": True, "ram_ratio": 1.5}
    if rng.random() < 0.1 and workers:
        selector = first_gpu_selector(rng.choice(workers))
        if selector:
            row["gpu_selector"] = selector
    return row


def _booked(result: Any, number: int, model_id: int) -> ModelInstance:
    chosen = result.candidates[result.selected]
    row: dict[str, Any] = {
        "id": 10_000 + number,
        "name": f"booked-{number}",
        "model_id": model_id,
        "worker_id": chosen.worker_id,
        "gpu_type": chosen.gpu_type,
        "gpu_indexes": chosen.gpu_indexes,
        "computed_resource_claim": chosen.computed_resource_claim.model_dump(),
    }
    if chosen.subordinate_workers:
        row["distributed_servers"] = {
            "subordinate_workers": [s.model_dump() for s in chosen.subordinate_workers]
        }
    return ModelInstance.model_validate(row)


def _change_cluster(rng: random.Random, workers: list[Worker], placed: list[ModelInstance]) -> None:
    """One random cluster change, in place of the lists (as a fold would rebuild them)."""
    roll = rng.random()
    if roll < 0.25 and placed:
        placed.pop(rng.randrange(len(placed)))
    elif roll < 0.45 and workers:
        position = rng.randrange(len(workers))
        workers[position] = Worker.model_validate(_worker_row(rng, workers[position].id))
    elif roll < 0.55 and len(workers) > 2:
        gone = workers.pop(rng.randrange(len(workers))).id
        placed[:] = [i for i in placed if i.worker_id != gone]
    elif roll < 0.6:
        new_id = max((w.id for w in workers), default=0) + 1
        workers.append(Worker.model_validate(_worker_row(rng, new_id)))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_memo_matches_fresh_decisions_on_a_moving_cluster(seed: int) -> None:
    rng = random.Random(seed)
    workers = [Worker.model_validate(_worker_row(rng, i)) for i in range(1, rng.randint(3, 12))]
    placed: list[ModelInstance] = []
    memo = SnapshotMemo()
    chain = replace(DEFAULT_CHAIN, max_candidates=rng.choice([None, 3]))
    for step in range(14):
        row = _model_row(rng, workers)
        request = ScheduleRequest.model_validate({"request_id": f"r{step}", "model": row}).model_copy(
            update={"workers": list(workers), "model_instances": list(placed)}
        )
        remembered = schedule(request, memo=memo, chain=chain)
        fresh = schedule(request, chain=chain)
        assert remembered.model_dump_json() == fresh.model_dump_json(), f"step {step}"
        if remembered.status == "scheduled" and rng.random() < 0.8:
            placed.append(_booked(remembered, step, row["id"]))
        if rng.random() < 0.5:
            _change_cluster(rng, workers, placed)


def _with_outside_use(rng: random.Random, row: dict[str, Any]) -> dict[str, Any]:
    """The row with some GPUs reporting memory used by other processes (read by ``policy: precise``)."""
    for device in row["status"]["gpu_devices"]:
        if rng.random() < 0.3:
            device["memory"]["used"] = rng.choice([2, 9, 20]) * GIB
    return row


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1), sharing=st.booleans())
def test_precise_memo_matches_fresh_decisions_on_a_moving_cluster(seed: int, sharing: bool) -> None:
    """The same walk under ``policy: precise`` (with and without GPU sharing): the per-worker
    outcomes, the offers of the distributed shapes and the memoized budgets and verdicts the
    memo keeps never change a decision."""
    rng = random.Random(seed)
    rows = [_with_outside_use(rng, _worker_row(rng, i)) for i in range(1, rng.randint(3, 10))]
    workers = [Worker.model_validate(row) for row in rows]
    placed: list[ModelInstance] = []
    memo = SnapshotMemo()
    for step in range(12):
        row = _model_row(rng, workers)
        raw = {"request_id": f"r{step}", "model": row, "policy": "precise", "gpu_sharing": sharing}
        request = ScheduleRequest.model_validate(raw).model_copy(
            update={"workers": list(workers), "model_instances": list(placed)}
        )
        remembered = schedule(request, memo=memo)
        fresh = schedule(request)
        assert remembered.model_dump_json() == fresh.model_dump_json(), f"step {step}"
        if remembered.status == "scheduled" and rng.random() < 0.8:
            placed.append(_booked(remembered, step, row["id"]))
        if rng.random() < 0.5:
            _change_cluster(rng, workers, placed)


def test_memo_reuses_outcomes_of_unchanged_workers() -> None:
    """After a booking only the booked worker is evaluated again (the others come from the memo)."""
    rows = [Worker.model_validate(worker(i, f"w{i}", [gpu(g, H100) for g in range(4)])) for i in (1, 2, 3)]
    memo = SnapshotMemo()
    tp2 = model(backend_parameters=["--tp-size", "2"], weight_bytes=weight_for_estimate(30))

    def decide(placed: list[ModelInstance]) -> Any:
        request = ScheduleRequest.model_validate({"request_id": "r", "model": tp2})
        return schedule(request.model_copy(update={"workers": rows, "model_instances": placed}), memo=memo)

    def outcomes() -> dict[tuple[object, ...], object]:
        return {
            (*key, worker_id): entry
            for key, table in memo._stages.items()
            for worker_id, entry in table.entries.items()
        }

    first = decide([])
    stage_entries = outcomes()
    booked = _booked(first, 1, 1)
    second = decide([booked])
    assert second.model_dump_json() == schedule(
        ScheduleRequest.model_validate({"request_id": "r", "model": tp2}).model_copy(
            update={"workers": rows, "model_instances": [booked]}
        )
    ).model_dump_json()
    changed = {key[-1] for key, entry in outcomes().items() if stage_entries.get(key) is not entry}
    assert changed == {booked.worker_id}


def test_memoized_computes_each_argument_once_and_is_shared_per_signature() -> None:
    """``Memoized`` evaluates an argument once, compares by signature, and a runner hands out
    one per name and signature: per decision, and across decisions through the memo."""
    from scheduler_core.caching import StageRunner
    from scheduler_core.memo import Memoized, SlotKey

    square_slot = SlotKey("square")
    from scheduler_core.cluster import ClusterState

    calls: list[int] = []

    def square(value: int) -> int:
        calls.append(value)
        return value * value

    squares = Memoized(("model", 1), square)
    assert [squares(3), squares(3), squares(4)] == [9, 9, 16] and calls == [3, 4]
    assert squares == Memoized(("model", 1), abs) and hash(squares) == hash(Memoized(("model", 1), abs))
    assert squares != Memoized(("model", 2), square)
    cluster = ClusterState([], [])
    alone = StageRunner(cluster)
    assert alone.memoized(square_slot, 1, square) is alone.memoized(square_slot, 1, square)
    assert StageRunner(cluster).memoized(square_slot, 1, square) is not alone.memoized(square_slot, 1, square)
    memo = SnapshotMemo()
    kept = StageRunner(cluster, memo).memoized(square_slot, 1, square)
    assert StageRunner(cluster, memo).memoized(square_slot, 1, square) is kept
    assert StageRunner(cluster, memo).memoized(square_slot, 2, square) is not kept


@settings(max_examples=200, deadline=None)
@given(
    scores=st.lists(st.sampled_from([0.0, 42.5, 85.0, 90.25, 100.0]), max_size=40),
    limit=st.integers(min_value=1, max_value=12),
)
def test_shown_candidates_are_the_best_scoring_earliest_first(scores: list[float], limit: int) -> None:
    """The capped list is the ``limit`` best by (score desc, index asc), in selector order."""
    from scheduler_core.ranking import shown_candidates as _shown_candidates

    expected = sorted(sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:limit])
    assert _shown_candidates(scores, limit) == expected


def _reference_spread(
    candidates: list[Any], instances: list[ModelInstance], model_id: int | None
) -> list[float]:
    """GPUStack's spread scorer written out directly (global counts, one candidate at a time)."""
    worker_count: dict[tuple[bool, int], int] = {}
    gpu_count: dict[tuple[bool, int, int], int] = {}
    for inst in instances:
        same = model_id is not None and inst.model_id == model_id
        placements = [(inst.worker_id, list(inst.gpu_indexes or ()))] if inst.worker_id is not None else []
        servers = inst.distributed_servers
        for sub in (servers.subordinate_workers or ()) if servers else ():
            if sub.worker_id is not None:
                placements.append((sub.worker_id, list(sub.gpu_indexes or ())))
        for worker_id, indexes in placements:
            worker_count[(same, worker_id)] = worker_count.get((same, worker_id), 0) + (len(indexes) or 1)
            for index in indexes:
                gpu_count[(same, worker_id, index)] = gpu_count.get((same, worker_id, index), 0) + 1

    def inverse(value: float, low: float, high: float) -> float:
        return 1.0 if high <= low else 1.0 - (value - low) / (high - low)

    ids = list(dict.fromkeys(c.worker.id for c in candidates))
    currents = [worker_count.get((True, w), 0) for w in ids]
    others = [worker_count.get((False, w), 0) for w in ids]
    scores = []
    for c in candidates:
        current = worker_count.get((True, c.worker.id), 0)
        other = worker_count.get((False, c.worker.id), 0)
        o_inv = inverse(other, min(others), max(others))
        c_inv = inverse(current, min(currents), max(currents))
        if 0 in currents:
            term = 0.85 + 0.15 * o_inv if current == 0 else 0.45 + 0.35 * c_inv + 0.20 * o_inv
        else:
            term = 0.50 + 0.25 * c_inv + 0.15 * o_inv
        term *= 100.0
        if not c.gpu_indexes:
            scores.append(term)
            continue
        gpu_terms = [
            1.0
            / (1 + gpu_count.get((True, c.worker.id, i), 0) + 0.2 * gpu_count.get((False, c.worker.id, i), 0))
            for i in c.gpu_indexes
        ]
        scores.append(0.85 * term + 0.15 * (sum(gpu_terms) / len(gpu_terms)) * 100.0)
    return scores


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_spread_scores_match_the_direct_formula(seed: int) -> None:
    """Per-worker counts (remembered across decisions) give GPUStack's spread scores exactly."""
    from scheduler_core.candidates import Candidate, Claim
    from scheduler_core.cluster import ClusterState
    from scheduler_core.scoring import spread_scores
    from scheduler_core.workers import worker_view

    rng = random.Random(seed)
    rows = [Worker.model_validate(_worker_row(rng, i)) for i in range(1, 7)]
    views = [worker_view(w) for w in rows]
    memo = SnapshotMemo()
    placed: list[ModelInstance] = []
    for step in range(6):
        for _ in range(rng.randint(0, 3)):
            host = rng.choice(views)
            indexes = sorted(rng.sample([g.index for g in host.gpus if g.index is not None], 1))
            placed.append(ModelInstance.model_validate({
                "id": len(placed), "model_id": rng.choice([1, 2, None]), "worker_id": host.id,
                "gpu_type": host.gpus[0].type, "gpu_indexes": indexes,
            }))
        claim = Claim({}, None, None, None)
        def indexes(index: int) -> tuple[int, ...]:
            return rng.choice([(index,), (index,), (index, 0), (index, 1), ()])  # (): a CPU candidate

        candidates = [
            Candidate(view, g.type, indexes(g.index), claim)
            for view in views for g in view.gpus[:2] if g.index is not None
        ]
        model_id = rng.choice([1, 2, 3, None])  # 3 never runs: a newcomer on every worker
        cluster = ClusterState(views, placed, memo)
        expected = _reference_spread(candidates, placed, model_id)
        assert spread_scores(candidates, cluster, model_id) == expected, step


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_spread_scores_kept_per_run_match_the_direct_formula(seed: int) -> None:
    """Scores kept per worker run (the single-GPU stage's runs, the same objects while a
    worker's instances are unchanged) are GPUStack's spread scores exactly, as instances land
    on other workers and the range of the workers' totals moves, for a new model and for one
    with replicas on some of the workers (its other workers' runs kept as a newcomer's)."""
    from scheduler_core.candidates import Candidate, Claim
    from scheduler_core.cluster import ClusterState
    from scheduler_core.scoring import spread_scores
    from scheduler_core.workers import worker_view

    rng = random.Random(seed)
    rows = [Worker.model_validate(_worker_row(rng, i)) for i in range(1, 7)]
    views = [worker_view(w) for w in rows]
    memo = SnapshotMemo()
    placed: list[ModelInstance] = []
    claim = Claim({}, None, None, None)
    runs: dict[int, tuple[Candidate, ...]] = {}
    for step in range(8):
        landed = set()
        for _ in range(rng.randint(0, 3)):
            host = rng.choice(views)
            index = rng.choice([g.index for g in host.gpus if g.index is not None])
            placed.append(ModelInstance.model_validate({
                "id": len(placed), "model_id": rng.choice([1, 2]), "worker_id": host.id,
                "gpu_type": host.gpus[0].type, "gpu_indexes": [index],
            }))
            landed.add(host.id)
        for view in views:  # a worker's run is made again only when its instances changed
            if view.id in landed or view.id not in runs:
                runs[view.id] = tuple(
                    Candidate(view, g.type, (g.index,), claim) for g in view.gpus if g.index is not None
                )
        kept = [runs[view.id] for view in views if runs[view.id]]
        candidates = [candidate for run in kept for candidate in run]
        cluster = ClusterState(views, placed, memo)
        model_id = rng.choice([1, 2, 3])  # model 3 never runs: a newcomer; 1 and 2 have replicas
        expected = _reference_spread(candidates, placed, model_id)
        assert spread_scores(candidates, cluster, model_id, kept) == expected, (step, model_id)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_kept_standing_follows_moving_ranges_with_kept_shares(seed: int) -> None:
    """The kept spread standing of a new model (its scores as a worker base plus each
    candidate's kept share): as instances land and leave and the range of the workers'
    totals moves up and down, every score of its ranking is GPUStack's formula on that
    cluster, for runs of GPU candidates and runs holding candidates without GPUs (scored
    by the worker term alone), and slots that are empty."""
    from scheduler_core.candidates import Candidate, Claim
    from scheduler_core.cluster import ClusterState
    from scheduler_core.outcomes import CandidateRuns
    from scheduler_core.scoring import _SpreadStanding
    from scheduler_core.workers import worker_view

    rng = random.Random(seed)
    views = [worker_view(Worker.model_validate(_worker_row(rng, i))) for i in range(1, 8)]
    claim = Claim({}, None, None, None)
    memo = SnapshotMemo()
    placed: list[ModelInstance] = []
    standing = _SpreadStanding()
    runs: dict[int, tuple[Candidate, ...]] = {}
    for step in range(14):
        landed = set()
        for _ in range(rng.randint(0, 3)):
            if placed and rng.random() < 0.3:
                landed.add(placed.pop(rng.randrange(len(placed))).worker_id)
                continue
            host = rng.choice(views)
            indexes = [g.index for g in host.gpus if g.index is not None][: rng.randint(1, 2)]
            placed.append(ModelInstance.model_validate({
                "id": 100 + len(placed) + 50 * step, "model_id": rng.choice([1, 2]), "worker_id": host.id,
                "gpu_type": host.gpus[0].type, "gpu_indexes": indexes,
            }))
            landed.add(host.id)
        for view in views:  # a worker's run is made again only when its instances changed
            if view.id in landed or view.id not in runs:
                gpus = [g for g in view.gpus if g.index is not None][:3]
                runs[view.id] = tuple(
                    Candidate(view, g.type, rng.choice([(g.index,), (g.index, gpus[0].index), ()]), claim)
                    for g in gpus if rng.random() < 0.8
                )
        slots = tuple(runs[view.id] for view in views)
        candidates = [candidate for run in slots for candidate in run]
        filed = CandidateRuns(tuple(candidates), slots, ("stage",), (tuple(views),))
        cluster = ClusterState(list(views), placed, memo)
        ranking = standing.rank(filed, cluster)
        if not candidates:
            continue
        assert ranking is not None, step
        assert ranking.flat() == _reference_spread(candidates, placed, 3), step  # model 3 never runs


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_a_standing_for_another_range_is_taken_from_the_kept_one_without_reading_loads(seed: int) -> None:
    """The standing a replica's holders force (another range of the other workers' counts) is
    made from the kept standing's totals and shares: no worker's load is read, and its scores
    and answers are those of a standing built for that range from the loads."""
    from unittest import mock

    from scheduler_core import scoring
    from scheduler_core.candidates import Candidate, Claim
    from scheduler_core.cluster import ClusterState
    from scheduler_core.outcomes import CandidateRuns
    from scheduler_core.ranking import ListRanking
    from scheduler_core.workers import worker_view

    rng = random.Random(seed)
    views = [worker_view(Worker.model_validate(_worker_row(rng, i))) for i in range(1, 8)]
    claim = Claim({}, None, None, None)
    placed = [
        ModelInstance.model_validate({
            "id": number, "model_id": 1, "worker_id": host.id, "gpu_type": host.gpus[0].type,
            "gpu_indexes": [g.index for g in host.gpus if g.index is not None][:1],
        })
        for number, host in enumerate(rng.choices(views, k=rng.randint(0, 12)))
    ]
    slots = tuple(
        tuple(
            Candidate(view, g.type, rng.choice([(g.index,), ()]), claim)
            for g in view.gpus if g.index is not None
        )
        for view in views
    )
    filed = CandidateRuns(tuple(c for run in slots for c in run), slots, ("stage",), (tuple(views),))
    cluster = ClusterState(list(views), placed, SnapshotMemo())
    kept = scoring._SpreadStanding()
    assert kept.rank(filed, cluster) is not None
    kept._where(filed)
    other = (rng.randint(0, 3), rng.randint(3, 6))
    with mock.patch.object(scoring, "_slot_loads", side_effect=AssertionError("a load was read")):
        forced = kept._forced(other, filed)
    built = scoring._SpreadStanding(other)
    expected = built.rank(filed, ClusterState(list(views), placed, SnapshotMemo()))
    assert forced.ranking is not None and expected is not None
    assert forced.ranking.flat() == expected.flat()
    assert forced.ranges == built.ranges
    listed = ListRanking(expected.flat(), scoring.pick_highest(expected.flat()))
    assert forced.ranking.best() == listed.best()
    assert forced.rank(filed, cluster) is forced.ranking  # synced: nothing to do on the same runs


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_memo_index_of_appended_removed_and_repeated_instances(seed: int) -> None:
    """The memo indexes instances appended at the end (a booking) without reading the others
    again; an instance removed, or one object listed twice (appended again, or anywhere),
    rebuilds it. Every decision equals a fresh one, whatever the sequence."""
    rng = random.Random(seed)
    workers = [Worker.model_validate(_worker_row(rng, i)) for i in range(1, rng.randint(3, 8))]
    placed: list[ModelInstance] = []
    memo = SnapshotMemo()
    for step in range(16):
        row = _model_row(rng, workers)
        request = ScheduleRequest.model_validate({"request_id": f"r{step}", "model": row}).model_copy(
            update={"workers": list(workers), "model_instances": list(placed)}
        )
        remembered = schedule(request, memo=memo)
        assert remembered.model_dump_json() == schedule(request).model_dump_json(), f"step {step}"
        memo.track_instances(tuple(placed))  # what a decision that reaches the strategies tracks
        assert memo.running_models() == Counter(i.model_id for i in placed), f"step {step}"
        roll = rng.random()
        if remembered.status == "scheduled" and roll < 0.6:
            placed.append(_booked(remembered, step, row["id"]))
        elif placed and roll < 0.75:
            placed.append(rng.choice(placed))  # the same object listed twice
        elif placed and roll < 0.9:
            placed.pop(rng.randrange(len(placed)))


@settings(max_examples=100, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["append", "append", "drop", "replace", "same"]), st.booleans()),
        max_size=25,
    )
)
def test_first_failure_reads_only_what_was_appended_and_answers_like_a_full_scan(
    steps: list[tuple[str, bool]],
) -> None:
    """``first_failure`` equals a scan from the start after any sequence of appends, removals and
    replacements, and after a passing sequence it reads only the items appended since."""
    memo = SnapshotMemo()
    items: list[tuple[bool]] = []
    read: list[tuple[bool]] = []

    def passes(item: tuple[bool]) -> bool:
        read.append(item)
        return item[0]

    for action, good in steps:
        previous = list(items)
        if action == "append":
            items.append((good,))
        elif action == "drop" and items:
            items.pop(0)
        elif action == "replace" and items:
            items[-1] = (good,)
        read.clear()
        answer = memo.first_failure(SlotKey("check"), items, passes)
        expected = next((i for i, item in enumerate(items) if not item[0]), None)
        assert answer == expected
        kept = memo._passed.get(SlotKey("check"))
        if expected is None:
            assert kept == tuple(items)
        if all(item[0] for item in previous) and items[: len(previous)] == previous and action != "replace":
            assert all(any(r is item for item in items[len(previous):]) for r in read)


@given(
    size=st.integers(min_value=0, max_value=12),
    steps=st.lists(
        st.tuples(
            st.sampled_from(["replace", "replace", "same", "grow", "shrink", "many"]),
            st.integers(min_value=0, max_value=11),
            st.lists(st.integers(min_value=0, max_value=5), max_size=4),
        ),
        max_size=20,
    ),
)
def test_tally_follows_replaced_values_and_counts_like_a_fresh_count(
    size: int, steps: list[tuple[str, int, list[int]]]
) -> None:
    """``tally`` equals a fresh count (no zero or negative entries left) after any sequence of
    values replaced in place, lists grown or shrunk and most values changed at once, and it
    reads only the replaced values' items while few change."""
    memo = SnapshotMemo()
    values = [(position % 3,) for position in range(size)]
    read: list[object] = []

    def items(value: tuple[int, ...]) -> tuple[int, ...]:
        read.append(value)
        return value

    memo.tally(SlotKey("t"), values, items)
    for action, position, new in steps:
        values = list(values)
        replaced = 0
        if action == "replace" and values:
            old, values[position % len(values)] = values[position % len(values)], tuple(new)
            replaced = int(old is not values[position % len(values)])  # () is one object
        elif action == "grow":
            values.append(tuple(new))
        elif action == "shrink" and values:
            values.pop(position % len(values))
        elif action == "many":
            values = [tuple(new) for _ in values]
        read.clear()
        counts = memo.tally(SlotKey("t"), values, items)
        assert counts == Counter(item for value in values for item in value)
        assert all(number > 0 for number in counts.values())
        if action in ("replace", "same") and len(values) >= 4:
            assert len(read) == 2 * replaced  # the old value's items out, the new one's in


def test_an_appended_instance_with_a_lone_surrogate_is_rejected_through_the_memo() -> None:
    """With a memo the instance names are read only once; one appended later with a lone
    surrogate is still rejected, with its position, exactly as without the memo."""
    rows = [Worker.model_validate(worker(1, "w1", [gpu(0, H100), gpu(1, H100)]))]
    memo = SnapshotMemo()
    placed = [
        ModelInstance.model_validate({"id": i, "name": f"ok-{i}", "model_id": 9, "worker_id": 1,
                                      "gpu_indexes": [0], "computed_resource_claim": {"vram": {"0": GIB}}})
        for i in range(3)
    ]
    base = ScheduleRequest.model_validate({"request_id": "r", "model": model()})

    def both(instances: list[ModelInstance]) -> tuple[Any, Any]:
        request = base.model_copy(update={"workers": rows, "model_instances": instances})
        return schedule(request, memo=memo), schedule(request)

    first, fresh = both(list(placed))
    assert first.status == "scheduled" and first.model_dump_json() == fresh.model_dump_json()
    bad = ModelInstance.model_validate({"id": 7, "name": "bad\ud800", "model_id": 9, "worker_id": 1})
    rejected, fresh = both([*placed, bad])
    assert rejected.status == "rejected" and rejected.error is not None
    assert rejected.error.field == "model_instances.3.name"
    assert rejected.model_dump_json() == fresh.model_dump_json()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_scores_kept_for_the_same_candidates_follow_every_change_of_their_workers(seed: int) -> None:
    """The same candidate objects scored decision after decision (as the stage outcomes a memo
    keeps hand them out) while instances come and go and worker views are replaced: every
    score equals GPUStack's formula on the cluster of that decision, so a score kept from an
    earlier decision is used only while its worker and the range of totals are unchanged."""
    from scheduler_core.candidates import Candidate, Claim
    from scheduler_core.cluster import ClusterState
    from scheduler_core.scoring import spread_scores
    from scheduler_core.workers import worker_view

    rng = random.Random(seed)
    rows = [Worker.model_validate(_worker_row(rng, i)) for i in range(1, 6)]
    views = [worker_view(w) for w in rows]
    claim = Claim({}, None, None, None)

    def candidates_of(views: list[Any]) -> list[Any]:
        return [
            Candidate(view, g.type, rng.choice([(g.index,), (g.index, 0), ()]), claim)
            for view in views for g in view.gpus[:3] if g.index is not None
        ]

    candidates = candidates_of(views)
    memo = SnapshotMemo()
    placed: list[ModelInstance] = []
    for step in range(12):
        roll = rng.random()
        if roll < 0.5 or not placed:
            host = rng.choice(views)
            indexes = [g.index for g in host.gpus if g.index is not None][:rng.randint(1, 2)]
            placed.append(ModelInstance.model_validate({
                "id": 100 + step, "model_id": rng.choice([1, 2, None]), "worker_id": host.id,
                "gpu_type": host.gpus[0].type, "gpu_indexes": indexes,
            }))
        elif roll < 0.8:
            placed.pop(rng.randrange(len(placed)))
        else:  # a worker row replaced: a new view, and new candidates for it
            position = rng.randrange(len(views))
            views[position] = worker_view(Worker.model_validate(_worker_row(rng, views[position].id)))
            candidates = [c for c in candidates if c.worker.id != views[position].id]
            candidates += candidates_of([views[position]])
        model_id = rng.choice([3, 3, 1, None])  # 3 never runs: a newcomer everywhere
        cluster = ClusterState(list(views), placed, memo)
        expected = _reference_spread(candidates, placed, model_id)
        assert spread_scores(candidates, cluster, model_id) == expected, step


def test_item_values_are_computed_again_only_for_changed_workers() -> None:
    """After a booking on one worker only that worker's items are computed again; after the
    worker views change, every item is."""
    from scheduler_core.cluster import ClusterState
    from scheduler_core.workers import worker_view

    views = [worker_view(Worker.model_validate(worker(i, f"w{i}", [gpu(0, H100)]))) for i in (1, 2, 3)]
    items = [(view.id, n) for view in views for n in range(2)]
    memo = SnapshotMemo()
    computed: list[tuple[int, int]] = []

    def compute(part: Any) -> list[int]:
        computed.extend(part)
        return [worker_id * 10 + n for worker_id, n in part]

    def values(instances: list[ModelInstance], seen: list[Any]) -> list[int]:
        computed.clear()
        cluster = ClusterState(seen, instances, memo)
        return cluster.per_item("slot", items, lambda item: item[0], compute)

    booking = ModelInstance.model_validate({"id": 1, "model_id": 1, "worker_id": 2, "gpu_indexes": [0]})
    assert values([], views) == [10, 11, 20, 21, 30, 31] and len(computed) == 6
    assert values([], views) == [10, 11, 20, 21, 30, 31] and computed == []
    assert values([booking], views) == [10, 11, 20, 21, 30, 31] and computed == [(2, 0), (2, 1)]
    replaced = [*views[:2], worker_view(Worker.model_validate(worker(3, "w3", [gpu(0, H100)])))]
    assert values([booking], replaced) == [10, 11, 20, 21, 30, 31] and len(computed) == 6


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    journal=st.sampled_from([2, 5, 100_000]),
    patch_limit=st.sampled_from([0, 1, 256]),
)
def test_patched_stage_runs_match_fresh_decisions(seed: int, journal: int, patch_limit: int) -> None:
    """A few models asked again and again (so a stage's last run over the same workers is
    patched with the workers that changed since), through bookings, deletions, replaced
    rows and a journal that starts over: every decision equals a fresh one."""
    from unittest import mock

    from scheduler_core.caching import StageRunner

    rng = random.Random(seed)
    workers = [Worker.model_validate(_worker_row(rng, i)) for i in range(1, rng.randint(4, 10))]
    models = [_model_row(rng, workers) for _ in range(3)]
    placed: list[ModelInstance] = []
    memo = SnapshotMemo()
    with (
        mock.patch.object(SnapshotMemo, "JOURNAL", journal),
        mock.patch.object(StageRunner, "PATCH_LIMIT", patch_limit),
    ):
        for step in range(18):
            row = rng.choice(models)
            request = ScheduleRequest.model_validate({"request_id": f"r{step}", "model": row}).model_copy(
                update={"workers": list(workers), "model_instances": list(placed)}
            )
            remembered = schedule(request, memo=memo)
            assert remembered.model_dump_json() == schedule(request).model_dump_json(), f"step {step}"
            if remembered.status == "scheduled" and rng.random() < 0.7:
                placed.append(_booked(remembered, step, row["id"]))
            if rng.random() < 0.3:
                _change_cluster(rng, workers, placed)


def test_a_booking_patches_the_last_run_with_the_booked_worker_only() -> None:
    """Deciding the same model again after a booking evaluates the booked worker only and
    takes every other worker's result from the last run over the same workers."""
    from unittest import mock

    from scheduler_core.caching import StageRunner

    rows = [Worker.model_validate(worker(i, f"w{i}", [gpu(g, H100) for g in range(4)])) for i in range(1, 6)]
    tp2 = model(backend_parameters=["--tp-size", "2"], weight_bytes=weight_for_estimate(30))
    memo = SnapshotMemo()
    evaluated: list[int] = []
    patched: list[bool] = []
    result_of, patch_of = StageRunner._result, StageRunner._patched

    def spy_result(self: Any, rule: Any, inputs: Any, gpu_type: Any, worker: Any, *rest: Any) -> Any:
        evaluated.append(worker.id)
        return result_of(self, rule, inputs, gpu_type, worker, *rest)

    def spy_patched(self: Any, *args: Any) -> Any:
        found = patch_of(self, *args)
        patched.append(found is not None)
        return found

    def decide(placed: list[ModelInstance]) -> Any:
        evaluated.clear()
        patched.clear()
        request = ScheduleRequest.model_validate({"request_id": "r", "model": tp2}).model_copy(
            update={"workers": rows, "model_instances": placed}
        )
        with (
            mock.patch.object(StageRunner, "_result", spy_result),
            mock.patch.object(StageRunner, "_patched", spy_patched),
        ):
            remembered = schedule(request, memo=memo)
        assert remembered.model_dump_json() == schedule(request).model_dump_json()
        return remembered

    first = decide([])
    assert sorted(evaluated) == [1, 2, 3, 4, 5] and patched == [False]
    booked = _booked(first, 1, 1)
    decide([booked])
    assert evaluated == [booked.worker_id] and patched == [True]


def test_columns_of_a_patched_run_are_the_last_ones_patched_at_the_booked_worker() -> None:
    """A stage's columns (lists read off each worker's result) after a booking: the last run's
    lists with the booked worker's entries read again, equal to reading every result."""
    from scheduler_core.caching import StageRunner
    from scheduler_core.cluster import ClusterState
    from scheduler_core.workers import worker_view

    views = tuple(worker_view(Worker.model_validate(worker(i, f"w{i}", [gpu(g, H100) for g in range(2)])))
                  for i in range(1, 5))
    totals = operator.attrgetter("total")
    rule = _TotalsRule()
    memo = SnapshotMemo()

    def columns(placed: list[ModelInstance]) -> tuple[Any, ...]:
        runner = StageRunner(ClusterState(views, placed, memo), memo)
        kept = runner.columns(rule, 0, "cuda", views, (totals,))
        (found,) = kept.lists
        assert found == [totals(result) for _, result in kept.results]
        return tuple(found)

    assert columns([]) == (160, 160, 160, 160)
    booked = ModelInstance.model_validate({
        "id": 1, "model_id": 1, "worker_id": 3, "gpu_type": "cuda", "gpu_indexes": [0],
        "computed_resource_claim": {"vram": {"0": 20 * GIB}},
    })
    rule.read.clear()
    assert columns([booked]) == (160, 160, 140, 160)
    assert rule.read == [3]  # only the booked worker was evaluated, every other entry kept
    assert columns([]) == (160, 160, 160, 160)


class _TotalsRule:
    """A per-worker rule whose result is the worker's free VRAM in GiB (and notes whom it read)."""

    name = "totals"
    reads_reported = False

    def __init__(self) -> None:
        self.read: list[int] = []

    def evaluate(self, inputs: int, gpus: Any, allocatable: Any) -> int:
        return sum(allocatable.vram.values()) // GIB

    def attach(self, inputs: int, worker: Any, outcome: int) -> Any:
        self.read.append(worker.id)
        return _Total(outcome)


class _Total:
    __slots__ = ("total",)

    def __init__(self, total: int) -> None:
        self.total = total


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_extended_instance_tuples_give_fresh_decisions_whatever_the_memo_saw_last(seed: int) -> None:
    """Instances handed over as tuples that say what they extend (:func:`scheduler_core.extended`,
    as the mirror's fold hands them out), with some tuples never shown to the memo (its link
    then points at a tuple the memo did not see), releases that start a new tuple and released
    instances booked again: every decision equals the same decision without a memo."""
    from scheduler_core import extended

    rng = random.Random(seed)
    workers = [Worker.model_validate(_worker_row(rng, i)) for i in range(1, rng.randint(3, 8))]
    pool = [_free_instance(rng, workers, number) for number in range(12)]
    listed: tuple[ModelInstance, ...] = ()
    memo = SnapshotMemo()
    for step in range(24):
        roll = rng.random()
        if roll < 0.55:
            listed = extended(listed, rng.sample(pool, rng.randint(1, 2)))
        elif roll < 0.8 and listed:  # a release: a tuple of its own
            gone = rng.randrange(len(listed))
            listed = (*listed[:gone], *listed[gone + 1:])
        if len(set(map(id, listed))) != len(listed) or rng.random() < 0.3:
            listed = tuple({id(i): i for i in listed}.values())  # each object once; or the memo skips this
            continue
        row = _model_row(rng, workers)
        request = ScheduleRequest.model_validate({"request_id": f"r{step}", "model": row}).model_copy(
            update={"workers": workers, "model_instances": listed}
        )
        remembered = schedule(request, memo=memo)
        assert remembered.model_dump_json() == schedule(request).model_dump_json(), f"step {step}"


def _free_instance(rng: random.Random, workers: list[Worker], number: int) -> ModelInstance:
    """A one-GPU instance on a random worker's GPU (a quarter of an H100)."""
    host = rng.choice(workers)
    device = rng.choice(host.gpus)  # every generated worker has GPUs
    return ModelInstance.model_validate({
        "id": 500 + number, "name": f"free-{number}", "model_id": rng.choice([1, 2, 7]),
        "worker_id": host.id, "gpu_type": device.type, "gpu_indexes": [device.index],
        "computed_resource_claim": {"vram": {str(device.index): 20 * GIB}},
    })


def test_a_value_per_own_worker_is_kept_until_its_instances_change_and_never_for_a_copy() -> None:
    """``ClusterState.per_own_worker`` (what a stage keeps each worker's shape with): computed
    once across decisions while the worker and its instances are unchanged, again after an
    instance lands on it, and each time for a copy of the worker (one GPU type of a worker
    with two), whose value never displaces the worker's own."""
    from scheduler_core.cluster import ClusterState
    from scheduler_core.workers import worker_view

    gpus = [gpu(0, H100), gpu(0, MI300X, type_="rocm", vendor="amd")]
    mixed = worker_view(Worker.model_validate(worker(1, "w1", gpus)))
    other = worker_view(Worker.model_validate(worker(2, "w2", [gpu(0, H100)])))
    views = [mixed, other]
    memo = SnapshotMemo()
    calls: list[str] = []

    def value(name: str) -> Any:
        def compute() -> str:
            calls.append(name)
            return name
        return compute

    placed: list[ModelInstance] = []
    for _ in range(3):  # three decisions on the same cluster
        cluster = ClusterState(views, tuple(placed), memo)
        assert cluster.per_own_worker(mixed, "k", value("own")) == "own"
        copy = mixed.of_type(mixed.gpus[0].type)
        assert copy is not mixed
        assert cluster.per_own_worker(copy, "k", value("copy")) == "copy"
    assert calls == ["own", "copy", "copy", "copy"]
    placed.append(ModelInstance.model_validate({
        "id": 1, "model_id": 5, "worker_id": 1, "gpu_type": mixed.gpus[0].type, "gpu_indexes": [0],
    }))
    cluster = ClusterState(views, tuple(placed), memo)
    assert cluster.per_own_worker(mixed, "k", value("after")) == "after"
    assert cluster.per_own_worker(other, "k", value("other")) == "other"
    cluster = ClusterState(views, tuple(placed), memo)
    assert cluster.per_own_worker(mixed, "k", value("again")) == "after"
    assert calls == ["own", "copy", "copy", "copy", "after", "other"]
    assert ClusterState(views, ()).per_own_worker(mixed, "k", value("no memo")) == "no memo"


class _SmallMemo(SnapshotMemo):
    """A memo with room for few stage entries, so that its tables are dropped as they fill."""

    STAGE_TABLES = 4
    STAGE_ENTRIES = 10


def test_stage_tables_are_bounded_by_their_entries_least_recently_used_first() -> None:
    """A new stage table first makes room: the tables used longest ago go while the others
    hold more than ``STAGE_ENTRIES`` worker entries, or while ``STAGE_TABLES`` are kept; a
    table used again is kept as the most recent."""
    memo = _SmallMemo()

    def filled(key: str, entries: int) -> None:
        table = memo.stage_outcomes((key,))
        for worker_id in range(entries):
            table.entries[worker_id] = (None, 0, None)  # type: ignore[assignment]

    def kept() -> list[str]:
        return [key[0] for key in memo._stages]  # type: ignore[index]

    filled("a", 6)
    filled("b", 6)
    assert kept() == ["a", "b"]
    memo.stage_outcomes(("a",))  # used again: now the most recent
    filled("c", 3)  # a and b hold 12 entries: b, used longest ago, goes
    assert kept() == ["a", "c"]
    filled("d", 0)
    filled("e", 0)
    filled("f", 0)  # four tables at most: a goes
    assert kept() == ["c", "d", "e", "f"]
    assert memo.stage_outcomes(("c",)).entries  # kept with its entries


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_decisions_with_stage_tables_dropped_as_they_fill_match_fresh_decisions(seed: int) -> None:
    """Model sizes in turn on a memo with room for few stage entries: tables are dropped
    and built again all the time, and every decision equals the same decision without a memo."""
    rng = random.Random(seed)

    def sized(step: int) -> dict[str, Any]:
        tp = rng.choice([1, 2, 4])
        return model(
            id=3_000 + step, name=f"m{step}", weight_bytes=weight_for_estimate(rng.choice([6, 8, 14, 30])),
            backend_parameters=[] if tp == 1 else ["--tp-size", str(tp)],
        )

    workers = _h100_workers(5)
    memo = _SmallMemo()

    def bounded() -> None:
        assert sum(len(table.entries) for table in memo._stages.values()) <= 10 + len(workers)

    _walk_against_fresh(rng, workers, memo, sized, bounded)


def _h100_workers(count: int) -> list[Worker]:
    """``count`` workers of four H100s each (ids from 1)."""
    rows = [worker(i, f"w{i}", [gpu(g, H100) for g in range(4)]) for i in range(1, count + 1)]
    return [Worker.model_validate(row) for row in rows]


def _walk_against_fresh(
    rng: random.Random, workers: list[Worker], memo: SnapshotMemo,
    model_of: Callable[[int], dict[str, Any]], check: Callable[[], None],
) -> None:
    """30 decisions of ``model_of(step)`` on ``memo``, each equal to the same decision without
    a memo and followed by ``check()``; most scheduled ones booked, some bookings released."""
    placed: list[ModelInstance] = []
    for step in range(30):
        row = model_of(step)
        request = ScheduleRequest.model_validate({"request_id": f"r{step}", "model": row}).model_copy(
            update={"workers": workers, "model_instances": list(placed)}
        )
        remembered = schedule(request, memo=memo)
        assert remembered.model_dump_json() == schedule(request).model_dump_json(), step
        check()
        if remembered.status == "scheduled" and rng.random() < 0.7:
            placed.append(_booked(remembered, step, row["id"]))
        if placed and rng.random() < 0.2:
            placed.pop(rng.randrange(len(placed)))


def test_kept_objects_are_bounded_by_their_weight_least_recently_used_first() -> None:
    """``kept`` objects go, least recently used first, while more than ``KEPT_OBJECTS`` are
    held or their weights add up past ``KEPT_WEIGHT``; the object being asked for stays
    whatever its weight, and an object used again weighs what its last use said."""

    class Memo(SnapshotMemo):
        KEPT_OBJECTS = 3
        KEPT_WEIGHT = 10

    memo = Memo()
    items = (object(),)
    built: list[str] = []

    def keep(slot: str, weight: int) -> object:
        def build() -> str:
            built.append(slot)
            return slot

        return memo.kept(slot, items, build, weight)

    def held() -> list[str]:
        return list(memo._objects)  # type: ignore[arg-type]

    keep("a", 4)
    keep("b", 4)
    assert held() == ["a", "b"] and memo._kept_weight == 8
    keep("a", 4)  # used again: the most recent, not built again
    assert held() == ["b", "a"] and built == ["a", "b"]
    keep("c", 3)  # 8 + 3 > 10: b, used longest ago, goes
    assert held() == ["a", "c"] and memo._kept_weight == 7
    keep("a", 6)  # a weighs 6 now: 6 + 3 fits
    assert held() == ["c", "a"] and memo._kept_weight == 9
    keep("d", 1)
    keep("e", 0)  # four objects: c goes
    assert held() == ["a", "d", "e"] and memo._kept_weight == 7
    keep("f", 25)  # heavier than the bound alone: everything else goes, f stays
    assert held() == ["f"] and memo._kept_weight == 25
    keep("b", 2)
    assert held() == ["b"] and memo._kept_weight == 2 and built == ["a", "b", "c", "d", "e", "f", "b"]
    memo._forget_workers()
    assert held() == [] and memo._kept_weight == 0


def test_a_spread_ranking_weighs_its_slots_and_candidates() -> None:
    """Five workers of four free H100s and a one-GPU spread model: one slot per worker and
    twenty candidates, so the kept ranking weighs 25; a tp4 model's weighs 5 + 5."""
    workers = _h100_workers(5)
    memo = SnapshotMemo()
    for params, weight in (([], 25), (["--tp-size", "4"], 10)):
        row = model(backend_parameters=params, weight_bytes=weight_for_estimate(14))
        request = ScheduleRequest.model_validate({"request_id": "r", "model": row}).model_copy(
            update={"workers": workers, "model_instances": []}
        )
        result = schedule(request, memo=memo)
        assert result.status == "scheduled" and len(result.candidates) == weight - 5
        assert list(memo._objects.values())[-1][2] == weight


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_decisions_with_rankings_dropped_by_their_weight_match_fresh_decisions(seed: int) -> None:
    """Spread models of several sizes in turn, some with replicas running, on a memo with
    room for about one ranking's weight: rankings are dropped and built again all the time,
    and every decision equals the same decision without a memo."""

    class Memo(SnapshotMemo):
        KEPT_WEIGHT = 30

    rng = random.Random(seed)

    def sized(step: int) -> dict[str, Any]:
        tp = rng.choice([1, 1, 2, 4])
        return model(
            id=rng.choice([1, 2, 3, 4]), name=f"m{step}",
            weight_bytes=weight_for_estimate(rng.choice([6, 8, 14, 30])),
            backend_parameters=[] if tp == 1 else ["--tp-size", str(tp)],
        )

    memo = Memo()

    def bounded() -> None:
        weights = [entry[2] for entry in memo._objects.values()]
        assert sum(weights) <= Memo.KEPT_WEIGHT or len(weights) == 1, weights

    _walk_against_fresh(rng, _h100_workers(6), memo, sized, bounded)
