"""Applying cluster events: each wakes exactly the parked requests it can unblock."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest
from builders import GIB, H100, instance
from service_builders import cluster_of, small_request, statuses, worker_row

from tasks.flows.followups import run_followup
from tasks.intake.snapshots import parse_snapshot
from tasks.state.parking import ParkedEntry, snapshot_facts
from tasks.testing import Harness

#: A claim of 20 GiB: one per 4090, a second waits.
TWENTY_GIB = {"GPUSTACK_MODEL_VRAM_CLAIM": str(20 * GIB)}


def test_a_freed_gpu_places_the_parked_request_and_only_that_one() -> None:
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a", labels={"gpu": "4090"}), worker_row(2, "b", labels={"gpu": "x"})))
    h.submit(small_request("first", env=TWENTY_GIB, worker_selector={"gpu": "4090"}))
    h.submit(small_request("waits", env=TWENTY_GIB, worker_selector={"gpu": "4090"}))
    h.submit(small_request("label", worker_selector={"gpu": "nowhere"}))
    h.pump()
    assert statuses(h) == [("first", "scheduled"), ("waits", "unschedulable"), ("label", "unschedulable")]
    parked = h.rt.parked.entries()
    assert ParkedEntry.model_validate_json(parked["waits"]).reasons == ["insufficient_vram"]
    assert ParkedEntry.model_validate_json(parked["label"]).reasons == ["label_mismatch"]
    summary = h.event({"kind": "instance_deleted", "request_id": "first"})
    assert summary["woken"] == ["waits"]
    h.pump()
    assert statuses(h)[-1] == ("waits", "scheduled")
    assert h.record("waits")["seq"] == "1"
    woken = h.events(["sched.request.woken"])
    assert [e.request_id for e in woken] == ["waits"] and woken[0].data["by"][0]["kind"] == "capacity_freed"


def test_label_and_readiness_changes_wake_their_parked_requests() -> None:
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a", count=2, state="not_ready", labels={"gpu": "h100"})))
    h.submit(small_request("ready-wait", worker_selector={"gpu": "h100"}))
    h.submit(small_request("label-wait", worker_selector={"zone": "z"}))
    h.pump()
    parked = h.rt.parked.entries()
    reasons = {rid: ParkedEntry.model_validate_json(raw).reasons for rid, raw in parked.items()}
    assert reasons == {"ready-wait": ["worker_not_ready"], "label-wait": ["label_mismatch"]}
    assert h.event({"kind": "worker_state", "worker_id": 1, "state": "ready"})["woken"] == ["ready-wait"]
    h.pump()
    summary = h.event({"kind": "worker_labels", "worker_id": 1, "labels": {"gpu": "h100", "zone": "z"}})
    assert summary["woken"] == ["label-wait"]
    h.pump()
    assert [s for _, s in statuses(h)][-2:] == ["scheduled", "scheduled"]


def test_gpu_memory_growth_wakes_capacity_waiters() -> None:
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a", total=8 * GIB)))
    h.submit(small_request("big"))
    h.pump()
    assert statuses(h) == [("big", "unschedulable")]
    summary = h.event(
        {"kind": "gpu_memory_changed", "worker_id": 1, "gpus": [{"type": "cuda", "index": 0, "total": H100}]}
    )
    assert summary["woken"] == ["big"]
    h.pump()
    assert statuses(h)[-1] == ("big", "scheduled")


def test_deleting_an_instance_twice_is_harmless() -> None:
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a")))
    h.submit(small_request("r"))
    h.pump()
    assert h.event({"kind": "instance_deleted", "request_id": "r"})["status"] == "released"
    assert h.event({"kind": "instance_deleted", "request_id": "r"})["status"] == "absent"
    assert h.rt.cluster.ledger()[1] == {}


@pytest.mark.parametrize("kind", ["worker_added", "worker_updated"])
def test_worker_upserts_record_full_rows(kind: str) -> None:
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a")))
    summary = h.event({"kind": kind, "worker": worker_row(2, "b", count=2)})
    assert summary["status"] == "applied"
    fold = h.rt.mirror.sync()
    assert sorted(fold.workers) == [1, 2]
    assert len((fold.workers[2].status or {}).get("gpu_devices") or []) == 2


def test_a_snapshot_reports_gpus_booked_past_their_capacity() -> None:
    h = Harness()
    busy = {
        "workers": [worker_row(1, "a", total=40 * GIB)],
        "model_instances": [
            {
                "id": 5,
                "name": "cp",
                "worker_id": 1,
                "gpu_type": "cuda",
                "gpu_indexes": [0],
                "computed_resource_claim": {"vram": {"0": 30 * GIB}},
            }
        ],
    }
    h.apply(busy)
    assert h.events(["sched.ledger.overbooked"]) == []
    h.apply({**busy, "workers": [worker_row(1, "a", total=20 * GIB)]})
    (over,) = h.events(["sched.ledger.overbooked"])
    assert over.data == {
        "worker_id": 1,
        "gpus": [{"gpu": "1:cuda:0", "booked": 30 * GIB, "capacity": 20 * GIB}],
    }


def _parked_behind_a_control_plane_instance(h: Harness, waiters: int) -> dict[str, Any]:
    """One 4090 held by a control-plane instance; ``waiters`` requests parked for it."""
    snapshot = cluster_of(worker_row(1, "a", labels={"gpu": "4090"}), worker_row(2, "b", labels={"gpu": "x"}))
    snapshot["model_instances"] = [instance(7, 1, {0: 20 * GIB})]
    h.apply(snapshot)
    for n in range(waiters):
        h.submit(small_request(f"w-{n}", env=TWENTY_GIB, worker_selector={"gpu": "4090"}))
    h.pump()
    assert len(h.rt.parked.entries()) == waiters
    return snapshot


def test_an_identical_snapshot_wakes_nobody_and_leaves_the_wake_epoch() -> None:
    """Issue 17, item 8: every snapshot woke every parked request (20,000 parked: 17,546
    decisions); now its real changes are derived: the same snapshot changes nothing."""
    h = Harness()
    snapshot = _parked_behind_a_control_plane_instance(h, 5)
    epoch = h.rt.client.get(h.rt.keys.epoch)
    summary = h.apply(snapshot)
    assert summary["woken"] == [] and h.queue == deque()
    assert h.rt.client.get(h.rt.keys.epoch) == epoch
    assert len(h.rt.parked.entries()) == 5 and not h.events(["sched.request.woken"])


def test_a_snapshot_wakes_for_the_capacity_it_frees_as_many_as_the_gpu_holds() -> None:
    """The control plane's instance is gone from the snapshot: capacity freed on worker 1, whose
    one 4090 takes one of the waiters (the oldest parked), not all five."""
    h = Harness()
    snapshot = _parked_behind_a_control_plane_instance(h, 5)
    summary = h.apply({**snapshot, "model_instances": []})
    assert summary["woken"] == ["w-0"]
    (woken,) = h.events(["sched.request.woken"])
    assert woken.data["by"] == [{"kind": "capacity_freed", "workers": [1]}]


def test_a_snapshot_wakes_for_the_workers_it_changes() -> None:
    """A label a waiter selects appears on worker 2: labels_changed on 2 wakes that waiter only."""
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a"), worker_row(2, "b", labels={"gpu": "x"})))
    h.submit(small_request("wants-y", worker_selector={"gpu": "y"}))
    h.submit(small_request("wants-z", worker_selector={"gpu": "z"}))
    h.pump()
    summary = h.apply(cluster_of(worker_row(1, "a"), worker_row(2, "b", labels={"gpu": "y"})))
    assert summary["woken"] == ["wants-y"]
    (woken,) = h.events(["sched.request.woken"])
    assert woken.data["by"] == [{"kind": "labels_changed", "workers": [2]}]


def test_a_snapshot_that_raced_another_change_wakes_everyone() -> None:
    """Facts derived from rows another change overtook could miss a wake: the script sees the
    version moved and wakes every parked request instead (woken in vain, never forgotten)."""
    h = Harness()
    snapshot = _parked_behind_a_control_plane_instance(h, 3)
    version, stored = h.rt.cluster.worker_rows()
    h.event({"kind": "worker_labels", "worker_id": 2, "labels": {"gpu": "x", "new": "1"}})  # the race
    rows = parse_snapshot(snapshot)
    facts = snapshot_facts(stored, rows.workers)
    applied = h.rt.cluster.apply_snapshot(rows, wake=facts, wake_version=version)
    done = run_followup(h.rt, applied.followup)
    assert done["woken"] == ["w-0", "w-1", "w-2"]


def test_a_release_wakes_only_the_precise_requests_its_freed_gpu_could_hold() -> None:
    """Issue 17, item 8: one release woke every parked precise request (they had no floor); each
    now parks with the bytes a GPU must free for it. Issue 22: that floor was a quarter of the
    weights (5 slots on a 4090 for a 7B at tp 1, 4 of them woken in vain); it is now what the fit's
    rules need at tp 1 (scheduler_core.precise.wake.layout_floor): SGLang's 0.5 GiB context, the
    whole 15.2 GB of weights and the 8,192-token KV floor at 56 KiB a token, so a 4090 freed
    whole (24 GiB) offers one slot and one of six is woken."""
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a", labels={"gpu": "4090"})))
    h.submit(small_request("holder", env=TWENTY_GIB))
    for n in range(6):
        request = small_request(f"p-{n}", backend_parameters=["--tp-size", "1"], env={},
                                weight_bytes=15_231_233_024)
        h.submit({**request, "policy": "precise"})
    h.pump()
    parked = {rid: ParkedEntry.model_validate_json(raw) for rid, raw in h.rt.parked.entries().items()}
    assert sorted(parked) == [f"p-{n}" for n in range(6)]
    assert {entry.floor_bytes for entry in parked.values()} == {GIB // 2 + 15_231_233_024 + 8192 * 57_344}
    summary = h.event({"kind": "instance_deleted", "request_id": "holder"})
    assert summary["woken"] == ["p-0"]
    h.pump()
    assert h.record("p-0")["status"] == "scheduled"  # the floor met, the request is placed
