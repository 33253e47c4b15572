"""Place mode through faults, against GPUStack's own server: a worker lost, an instance deleted,
a model that fits nowhere until a worker joins, the bridge SIGKILLed and restarted, GPUStack's
server restarted (its watch streams cut). Each ends with 0 duplicated and 0 lost placements:
every instance placed exactly once per move, every booking in gpusched one GPUStack instance's.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Callable

import pytest

from tasks.edges.gpustack_bridge.ids import base_request_id, instance_of
from tests.gpustack_bridge.scenario import World, assert_consistent, placements, scheduled_results, wait_for
from tests.gpustack_bridge.synthetic import H100_SPEC, L40S_SPEC

pytestmark = [pytest.mark.gpustack, pytest.mark.slow]


def test_a_worker_that_stops_heartbeating_has_its_instances_moved_exactly_once(
    world: Callable[..., World],
) -> None:
    w = world("place", unreachable_grace_s=3, ready_stable_s=1)
    names = w.start_fleet(3, [H100_SPEC, H100_SPEC])
    w.start_bridge()
    w.create_model("qwen2.5-0.5b", replicas=2)
    before = {r["id"]: r for r in w.running(2)}
    lost_name = next(iter(before.values()))["worker_name"]
    moved_ids = {i for i, r in before.items() if r["worker_name"] == lost_name}
    assert w.fleet is not None
    w.fleet.by_name(lost_name).stop_heartbeats()

    def moved() -> bool:
        rows = {r["id"]: r for r in w.instances()}
        return all(
            rows[i]["worker_name"] not in (lost_name, None) and rows[i]["state"] == "running"
            for i in moved_ids
        )

    wait_for(moved, 150, f"the instances of {lost_name} moved")
    after = {r["id"]: r for r in w.instances()}
    assert set(after) == set(before)  # moved in place: GPUStack deleted and re-created nothing
    results = scheduled_results(w)
    moves = Counter(base_request_id(rid) for rid in results if "~" in rid)
    assert sorted(moves.values()) == [1] * len(moved_ids)  # each lost instance moved once
    assert {r["worker_name"] for r in after.values()} <= set(names) - {lost_name}
    assert_consistent(w)


def test_a_deleted_instance_is_cancelled_its_gpus_released_and_its_replacement_placed(
    world: Callable[..., World],
) -> None:
    w = world("place")
    w.start_fleet(2, [H100_SPEC])
    w.start_bridge()
    w.create_model("qwen2.5-0.5b", replicas=2)
    first = w.running(2)
    victim = first[0]
    w.server.admin_call("DELETE", f"/v2/model-instances/{victim['id']}")
    rows = w.wait_instances(
        lambda rows: (
            victim["id"] not in {r["id"] for r in rows} and sum(r["state"] == "running" for r in rows) == 2
        ),
        "the replacement running",
    )
    replacement = next(r for r in rows if r["id"] != first[1]["id"])
    assert replacement["worker_id"] == victim["worker_id"]  # the only GPU left: the one released
    released = [f for f in w.deployment.results() if f["status"] == "released"]
    assert [instance_of(f["request_id"], w.cluster_id) for f in released] == [victim["id"]]
    assert_consistent(w)


def test_a_model_no_worker_can_hold_waits_with_gpustacks_message_then_places_when_a_worker_joins(
    world: Callable[..., World],
) -> None:
    w = world("place")
    w.start_fleet(1, [L40S_SPEC, L40S_SPEC])  # two GPUs: a tp-4 model fits on no worker, nor across workers
    w.start_bridge()
    model = w.create_model("qwen2.5-32b", replicas=1, params=["--tp-size", "4"])
    [row] = w.wait_instances(
        lambda rows: (
            bool(rows) and (rows[0].get("state_message") or "").startswith("No suitable workers.\nDetails:\n")
        ),
        "GPUStack's no-fit message",
    )
    assert row["state"] == "pending" and row["worker_id"] is None
    w.add_workers(1, [H100_SPEC] * 4, prefix="big")
    [placed] = w.running(1, timeout=120)
    assert placed["id"] == row["id"] and placed["model_id"] == model["id"]
    assert len(placed["gpu_indexes"]) == 4 and placed["worker_name"].startswith("big-")
    assert placed["state_message"] == ""
    assert_consistent(w)


def test_the_bridge_sigkilled_mid_run_and_restarted_places_every_instance_once(
    world: Callable[..., World],
) -> None:
    w = world("place")
    w.start_fleet(4, [H100_SPEC, H100_SPEC])
    bridge = w.start_bridge()
    w.create_model("qwen2.5-0.5b", replicas=6)
    wait_for(lambda: '"gpustack.submitted"' in bridge.log(), 60, "the first submission")
    bridge.kill(signal.SIGKILL)  # mid-run: some requests submitted, some placements not yet written
    w.create_model("qwen2.5-7b", replicas=2)  # created while no bridge runs
    w.start_bridge()
    rows = w.running(8, timeout=120)
    assert len(rows) == 8
    assert sorted(scheduled_results(w).values()) == [1] * 8
    assert_consistent(w)


def test_gpustacks_server_restarted_cuts_the_watch_and_the_bridge_carries_on(
    world: Callable[..., World],
) -> None:
    w = world("place")
    w.start_fleet(3, [H100_SPEC, H100_SPEC])
    bridge = w.start_bridge()
    w.create_model("qwen2.5-0.5b", replicas=2)
    before = placements(w.running(2))
    w.server.restart(crash=True)  # SIGKILL, then 25-65 s to start: every watch cut, every write refused
    assert not bridge.exited()
    w.create_model("qwen2.5-7b", replicas=2)
    rows = w.running(4, timeout=180)
    after = placements(rows)
    assert {name: after[name] for name in before} == before  # nothing placed before was re-placed
    assert not bridge.exited()
    assert bridge.log().count('"gpustack.synced"') == 1 and '"gpustack.watch_cut"' in bridge.log()
    assert_consistent(w)
