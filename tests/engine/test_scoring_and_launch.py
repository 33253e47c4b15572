"""Placement scoring (binpack / spread), the pick, and launch arguments."""

from __future__ import annotations

import pytest
from builders import GIB, H100, RTX_4090, instance, model, request, uniform_worker, view
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core import schedule
from scheduler_core.candidates import Candidate, Claim, Subordinate
from scheduler_core.cluster import ClusterState
from scheduler_core.launch import launch_arguments, parallelism
from scheduler_core.scoring import binpack_score, pick_highest

CLAIM_4090 = 22_060_864_634  # int(4090 total × 0.848)


def two_workers(strategy):
    workers = [uniform_worker(1, "a", 1, RTX_4090), uniform_worker(2, "b", 1, RTX_4090)]
    busy = [instance(1, 1, {0: 2 * GIB}, model_id=42)]
    return schedule(request(model(placement_strategy=strategy), workers, busy))


def test_binpack_prefers_the_fuller_gpu():
    """Rule: binpack = max over GPUs of (1·ram% + 2·vram%)/3 with vram% = claim/allocatable·100."""
    result = two_workers("binpack")
    scores = [c.score for c in result.candidates]
    assert scores == pytest.approx(
        [2 * (CLAIM_4090 / (RTX_4090 - 2 * GIB) * 100) / 3, 2 * (CLAIM_4090 / RTX_4090 * 100) / 3], rel=1e-12
    )
    assert result.selected == 0


def test_spread_prefers_the_emptier_worker():
    """Rule: spread: no worker runs this model → 0.85 + 0.15·inv(others); GPU term 1/(1+cur+0.2·oth).

    a: worker 0.85, GPU 1/1.2 → 0.85·85 + 0.15·83.33 = 84.75; b: 100.
    """
    result = two_workers("spread")
    assert [c.score for c in result.candidates] == pytest.approx([84.75, 100.0], rel=1e-12)
    assert result.selected == 1


def test_spread_when_every_candidate_worker_runs_the_model():
    """Rule: all candidate workers host the model → 0.50 + 0.25·inv(cur) + 0.15·inv(oth) (ceiling 0.90)."""
    workers = [uniform_worker(1, "a", 2, H100), uniform_worker(2, "b", 2, H100)]
    busy = [
        instance(1, 1, {0: GIB}, model_id=1),
        instance(2, 2, {0: GIB}, model_id=1),
        instance(3, 2, {1: GIB}, model_id=1),
    ]
    result = schedule(request(model(placement_strategy="spread"), workers, busy))
    by_place = {(c.worker_name, tuple(c.gpu_indexes)): c.score for c in result.candidates}
    # a: cur 1 (lo 1, hi 2) → inv 1; oth 0 → inv 1 → 0.90; GPU1 is free → 1.0; GPU0 has one → 0.5
    assert by_place[("a", (1,))] == pytest.approx(0.85 * 90 + 0.15 * 100)
    assert by_place[("a", (0,))] == pytest.approx(0.85 * 90 + 0.15 * 50)
    assert result.candidates[result.selected].worker_name == "a"


def _view(worker_id: int, count: int):
    return view(worker_id, [100] * count, ip=f"10.0.0.{worker_id}")


def _claim(amount: int, count: int) -> Claim:
    return Claim(
        vram=dict.fromkeys(range(count), amount), ram=None, vram_utilization=0.5, estimated_vram=None
    )


def test_binpack_with_subordinates_weights_leader_five_and_multiplies_the_sum():
    """Rule: (5·leader + Σsubs·n)/(5 + n) — GPUStack multiplies the *sum* by n."""
    views = [_view(1, 1), _view(2, 1), _view(3, 1)]
    cluster = ClusterState(views, [])
    candidate = Candidate(
        views[0],
        "cuda",
        (0,),
        _claim(60, 1),
        subordinates=(
            Subordinate(views[1], "cuda", (0,), _claim(30, 1)),
            Subordinate(views[2], "cuda", (0,), _claim(90, 1)),
        ),
    )
    leader, s1, s2 = 2 * 60 / 3, 2 * 30 / 3, 2 * 90 / 3
    assert binpack_score(candidate, cluster) == pytest.approx((5 * leader + (s1 + s2) * 2) / 7)


def test_pick_is_first_highest():
    """Rule: strict '>' scan: ties keep the earliest candidate."""
    assert pick_highest([50.0, 70.0, 70.0, 10.0]) == 1
    assert pick_highest([]) is None


def _strict_scan(scores: list[float]) -> int | None:
    """GPUStack's walk written out: replace the pick only on a strictly greater score."""
    chosen = None
    for position, score in enumerate(scores):
        if chosen is None or score > scores[chosen]:
            chosen = position
    return chosen


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from([0.0, -0.0, 15.0, 99.5, 100.0]), st.floats()), max_size=30))
def test_pick_matches_the_strict_scan_on_any_floats(scores):
    """The pick is the strict scan's, for ties, signed zeros, infinities and NaN alike."""
    assert pick_highest(scores) == _strict_scan(scores)


def test_parallelism_rules():
    """Rule: one node tp = its GPUs; equal nodes tp = GPUs per node, pp = nodes; unequal → tp 1, pp = all."""
    views = [_view(1, 4), _view(2, 4), _view(3, 2)]
    single = Candidate(views[0], "cuda", (0, 1, 2, 3), _claim(1, 4))
    equal = Candidate(
        views[0],
        "cuda",
        (0, 1, 2, 3),
        _claim(1, 4),
        subordinates=(Subordinate(views[1], "cuda", (0, 1, 2, 3), _claim(1, 4)),),
    )
    unequal = Candidate(
        views[0],
        "cuda",
        (0, 1, 2, 3),
        _claim(1, 4),
        subordinates=(Subordinate(views[2], "cuda", (0, 1), _claim(1, 2)),),
    )
    assert [parallelism(c) for c in (single, equal, unequal)] == [(4, 1), (4, 2), (1, 6)]


def test_launch_keeps_user_flags_and_adds_only_what_is_missing():
    """Rule: no derived tp/pp when the user set parallelism; no injected fraction when the user set one."""
    view = _view(1, 2)
    candidate = Candidate(view, "cuda", (0, 1), _claim(1, 2))
    assert launch_arguments(["--tp-size", "2"], candidate).backend_parameters == [
        "--tp-size",
        "2",
        "--mem-fraction-static",
        "0.5",
    ]
    assert launch_arguments(["--mem-fraction-static=0.7"], candidate).backend_parameters == [
        "--mem-fraction-static=0.7",
        "--tp-size",
        "2",
    ]


def test_launch_for_distributed_candidate_respects_user_dist_init_addr():
    """Rule: per-node --nnodes/--node-rank; a user --dist-init-addr is kept as given."""
    views = [_view(1, 2), _view(2, 2)]
    candidate = Candidate(
        views[0],
        "cuda",
        (0, 1),
        _claim(1, 2),
        subordinates=(Subordinate(views[1], "cuda", (0, 1), _claim(1, 2)),),
    )
    launch = launch_arguments(["--dist-init-addr", "10.9.9.9:5000"], candidate)
    assert [n.node_rank for n in launch.nodes] == [0, 1]
    assert launch.nodes[1].backend_parameters == [
        "--dist-init-addr",
        "10.9.9.9:5000",
        "--tp-size",
        "2",
        "--pp-size",
        "2",
        "--mem-fraction-static",
        "0.5",
        "--nnodes",
        "2",
        "--node-rank",
        "1",
    ]


def test_max_candidates_keeps_the_best_in_selector_order():
    """Option: a chain may cap reported candidates; the pick and selector order are kept."""
    from dataclasses import replace

    from scheduler_core import DEFAULT_CHAIN

    workers = [uniform_worker(i, f"w{i}", 1, RTX_4090) for i in range(1, 6)]
    busy = [instance(1, 3, {0: GIB}, model_id=42)]  # w3 is the only worse spread candidate
    full = schedule(request(model(), workers, busy))
    capped = schedule(request(model(), workers, busy), chain=replace(DEFAULT_CHAIN, max_candidates=2))
    assert (full.candidates_total, capped.candidates_total) == (5, 5)
    assert [c.worker_name for c in capped.candidates] == ["w1", "w2"]
    assert capped.candidates[capped.selected] == full.candidates[full.selected]


def test_snapshot_memo_never_changes_a_result():
    """A memo reused across decisions on a changing cluster gives byte-identical results."""
    from scheduler_core import ModelInstance, ScheduleRequest, SnapshotMemo, Worker

    workers = [Worker.model_validate(uniform_worker(i, f"w{i}", 4, RTX_4090)) for i in range(1, 6)]
    memo = SnapshotMemo()
    placed: list[ModelInstance] = []
    for step in range(8):
        row = request(model(backend_parameters=["--tp-size", "2"]), [], [])
        req = ScheduleRequest.model_validate(row).model_copy(
            update={"workers": workers, "model_instances": placed}
        )
        with_memo, without = schedule(req, memo=memo), schedule(req)
        assert with_memo.model_dump_json() == without.model_dump_json()
        chosen = with_memo.candidates[with_memo.selected]
        placed = [
            *placed,
            ModelInstance.model_validate(
                {
                    "id": step,
                    "worker_id": chosen.worker_id,
                    "gpu_type": "cuda",
                    "gpu_indexes": chosen.gpu_indexes,
                    "computed_resource_claim": chosen.computed_resource_claim.model_dump(),
                }
            ),
        ]
        if step == 4:  # a worker row replaced by an updated one (new object): recomputed
            workers = [
                *workers[:-1],
                Worker.model_validate(uniform_worker(5, "w5", 4, RTX_4090, state="ready")),
            ]
