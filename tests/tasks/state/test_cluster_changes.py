"""Applying cluster events: each wakes exactly the parked requests it can unblock."""

from __future__ import annotations

import pytest
from builders import GIB, H100
from service_builders import cluster_of, small_request, statuses, worker_row

from tasks.state.parking import ParkedEntry
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
