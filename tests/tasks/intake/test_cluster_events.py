"""The cluster events ``gpusched.cluster_event`` accepts: invalid ones are refused naming the field."""

from __future__ import annotations

import pytest
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


def test_the_door_names_the_field_of_every_bad_event() -> None:
    from tasks.intake.cluster_events import parse_event
    from tasks.intake.limits import IntakeLimits, InvalidField

    def field(raw: object, limits: IntakeLimits | None = None) -> str:
        try:
            parse_event(raw, limits)
        except InvalidField as error:
            return error.field
        raise AssertionError(f"{raw!r} passed")

    assert field({"kind": "nope"}) == "kind"
    assert field({"worker_id": 1}) == "kind"
    assert field("snapshot") == "event"
    assert field({"kind": "worker_state", "worker_id": 1, "state": "ready", "typo": 1}) == "typo"
    assert field({"kind": "gpu_memory_changed", "worker_id": 1,
                  "gpus": [{"type": "x;1:cuda", "index": 0, "total": 1}]}) == "gpus.0.type"
    assert field({"kind": "worker_added", "worker": worker_row(1, "a:b")}) == "worker.name"
    assert field({"kind": "instance_deleted", "instance_key": "id:1;req:x"}) == "instance_key"
    assert field({"kind": "instance_deleted", "request_id": "a=b"}) == "request_id"
    assert field({"kind": "worker_labels", "worker_id": 1, "labels": {"gpu": "\ud800"}}) == "labels.gpu"
    big = {"kind": "worker_labels", "worker_id": 1, "labels": {"k": "v" * 5000}}
    assert field(big, IntakeLimits(max_event_bytes=4096)) == "event"
    snapshot = {"kind": "snapshot", **cluster_of(*(worker_row(w, f"w{w}") for w in range(1, 13)))}
    assert field(snapshot, IntakeLimits(max_snapshot_bytes=4096)) == "snapshot"
    parse_event(snapshot, IntakeLimits(max_event_bytes=4096))  # a snapshot has its own limit


def test_events_that_do_not_fit_the_cluster_are_named() -> None:
    from scheduler_core import Worker
    from tasks.intake.cluster_events import check_against_worker, parse_event
    from tasks.intake.limits import InvalidField

    stored = Worker.model_validate(worker_row(1, "a", total=8 * GIB))
    state = parse_event({"kind": "worker_state", "worker_id": 7, "state": "ready"})
    with pytest.raises(InvalidField, match="no worker 7 in the cluster") as unknown:
        check_against_worker(state, None)
    assert unknown.value.field == "worker_id"
    check_against_worker(parse_event({"kind": "worker_added", "worker": worker_row(7, "n")}), None)
    gpus = parse_event({"kind": "gpu_memory_changed", "worker_id": 1, "gpus": [
        {"index": 0, "total": H100}, {"type": "rocm", "index": 0, "total": H100}]})
    with pytest.raises(InvalidField) as wrong:
        check_against_worker(gpus, stored)
    assert wrong.value.field == "gpus.1.index"
