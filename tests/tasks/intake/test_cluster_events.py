"""The cluster events ``gpusched.cluster_event`` accepts: invalid ones are refused naming the field."""

from __future__ import annotations

from builders import GIB, H100
from service_builders import cluster_of, worker_row

from tasks.testing import Harness


def test_invalid_cluster_events_are_rejected_with_the_field() -> None:
    h = Harness()
    summary = h.event({"kind": "worker_state", "worker_id": 1, "state": "sleepy"})
    assert summary["status"] == "rejected" and summary["field"] == "state"
    assert h.event({"kind": "nope"})["status"] == "rejected"
    assert h.event({"kind": "instance_deleted"})["status"] == "rejected"
    assert h.event(["not", "a", "dict"])["status"] == "rejected"
    assert len(h.events(["sched.cluster.event_rejected"])) == 4
    assert h.event({"kind": "worker_state", "worker_id": 99, "state": "ready"})["status"] == "unknown_worker"


def test_invalid_snapshot_events_are_rejected_naming_the_row() -> None:
    h = Harness()
    bad = h.event({"kind": "snapshot", "workers": [{"id": "x"}], "model_instances": []})
    assert (bad["status"], bad["field"]) == ("rejected", "workers.0.id")
    twice = [worker_row(1, "a"), worker_row(1, "b")]
    dup = h.event({"kind": "snapshot", "workers": twice, "model_instances": []})
    assert (dup["status"], dup["field"]) == ("rejected", "workers.1.id")
    truncated = h.event({"kind": "snapshot", "workers": twice[:1]})
    assert (truncated["status"], truncated["field"]) == ("rejected", "model_instances")
    assert [e.data["field"] for e in h.events(["sched.cluster.event_rejected"])] == [
        "workers.0.id",
        "workers.1.id",
        "model_instances",
    ]
    assert h.rt.cluster.version() == 0


def test_gpu_memory_changes_must_name_the_workers_gpus() -> None:
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a", total=8 * GIB)))
    wrong = h.event({"kind": "gpu_memory_changed", "worker_id": 1, "gpus": [{"index": 3, "total": H100}]})
    assert (wrong["status"], wrong["field"]) == ("rejected", "gpus.0.index")
    assert (
        h.event(
            {
                "kind": "gpu_memory_changed",
                "worker_id": 1,
                "gpus": [{"type": "rocm", "index": 0, "total": H100}],
            }
        )["status"]
        == "rejected"
    )
    assert h.rt.cluster.version() == 1
    untyped = h.event({"kind": "gpu_memory_changed", "worker_id": 1, "gpus": [{"index": 0, "total": H100}]})
    assert untyped["status"] == "applied"
    assert h.rt.cluster.ledger()[0] == {"1:cuda:0": H100}
