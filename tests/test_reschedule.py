"""Parking with reason codes, wake rules, rescheduling on lost workers, hysteresis, pins."""

from __future__ import annotations

from typing import Any

import pytest
from builders import GIB, H100, RTX_4090, model, uniform_worker

from scheduler_core import ScheduleResult, Worker
from tasks.parking import Change, ParkedEntry, blocking_reasons, parked_json, wake_targets, woken_by
from tasks.testing import Harness

#: A 7B model's claim on one GPU of any size (keeps the scenarios about capacity, not estimates).
SMALL = {"GPUSTACK_MODEL_VRAM_CLAIM": str(10 * GIB)}


def _worker(wid: int, name: str, count: int = 1, total: int = RTX_4090, **kw: Any) -> dict[str, Any]:
    return uniform_worker(wid, name, count, total, **kw)


def _request(rid: str, **model_fields: Any) -> dict[str, Any]:
    fields = {"env": SMALL, **model_fields}
    return {"request_id": rid, "model": model(**fields)}


def _statuses(h: Harness) -> list[tuple[str, str]]:
    return [(r["request_id"], r["status"]) for r in h.results()]


# ------------------------------------------------------------------- reasons
def test_reasons_come_from_the_blocking_filter_or_the_strategies() -> None:
    events = [{"level": "info", "action": "a", "message": "m", "reason": "tp_not_divisible"},
              {"level": "info", "action": "b", "message": "m", "reason": "insufficient_vram"}]
    result = ScheduleResult.model_validate({"request_id": "r", "status": "unschedulable", "events": events})
    assert blocking_reasons(result, None) == ["insufficient_vram", "tp_not_divisible"]
    assert blocking_reasons(result, "label_mismatch") == ["label_mismatch"]
    assert blocking_reasons(result, None, overcommit=True)[-1] == "tp_not_divisible"
    assert "overcommit" in blocking_reasons(result, None, overcommit=True)
    empty = ScheduleResult(request_id="r", status="unschedulable")
    assert blocking_reasons(empty, None) == ["no_candidate"]


def _entry(reasons: list[str], **kw: Any) -> ParkedEntry:
    return ParkedEntry(seq=0, reasons=reasons, **kw)


def _w(**kw: Any) -> Worker:
    return Worker.model_validate(_worker(7, kw.pop("name", "w7"), **kw))


def test_freed_capacity_wakes_capacity_reasons_on_matching_workers_only() -> None:
    entry = _entry(["insufficient_vram"], worker_selector={"gpu": "h100"}, cluster_id=1)
    assert woken_by(entry, Change("capacity_freed", (_w(labels={"gpu": "h100"}),)))
    assert not woken_by(entry, Change("capacity_freed", (_w(labels={"gpu": "4090"}),)))
    assert not woken_by(entry, Change("capacity_freed", (_w(labels={"gpu": "h100"}, cluster_id=2),)))
    assert not woken_by(entry, Change("capacity_freed", (_w(labels={"gpu": "h100"}, state="not_ready"),)))
    assert not woken_by(_entry(["label_mismatch"]), Change("capacity_freed", (_w(),)))


def test_each_change_kind_wakes_what_it_can_clear() -> None:
    worker = (_w(),)
    assert woken_by(_entry(["worker_not_ready"]), Change("worker_ready", worker))
    assert woken_by(_entry(["label_mismatch"]), Change("labels_changed", worker))
    assert not woken_by(_entry(["worker_not_ready"]), Change("labels_changed", worker))
    assert woken_by(_entry(["gpu_selector_mismatch"]), Change("worker_added", worker))
    assert woken_by(_entry(["heterogeneous_gpus"]), Change("snapshot"))
    assert not woken_by(_entry(["heterogeneous_gpus"]), Change("worker_added", worker))
    assert woken_by(_entry(["some_future_code"]), Change("capacity_increased", worker))


def test_pinned_requests_wake_only_for_their_own_workers() -> None:
    entry = _entry(["gpu_selector_mismatch"], pinned_workers=["w7"])
    assert woken_by(entry, Change("worker_added", (_w(name="w7"),)))
    assert not woken_by(entry, Change("worker_added", (_w(name="w8"),)))


def test_wake_targets_are_sorted_and_carry_the_parked_seq() -> None:
    parked = {
        "b": parked_json(ParkedEntry(seq=2, reasons=["insufficient_vram"])),
        "a": parked_json(ParkedEntry(seq=0, reasons=["insufficient_vram"])),
        "c": parked_json(ParkedEntry(seq=0, reasons=["label_mismatch"])),
    }
    assert wake_targets(parked, [Change("capacity_freed", (_w(),))]) == [("a", 0), ("b", 2)]


# ----------------------------------------------------------------- scenarios
def _cluster(*workers: dict[str, Any]) -> dict[str, Any]:
    return {"workers": list(workers), "model_instances": []}


def test_a_freed_gpu_places_the_parked_request_and_only_that_one() -> None:
    h = Harness()
    h.apply(_cluster(_worker(1, "a", labels={"gpu": "4090"}), _worker(2, "b", labels={"gpu": "x"})))
    h.submit(_request("first", env={"GPUSTACK_MODEL_VRAM_CLAIM": str(20 * GIB)},
                      worker_selector={"gpu": "4090"}))
    h.submit(_request("waits", env={"GPUSTACK_MODEL_VRAM_CLAIM": str(20 * GIB)},
                      worker_selector={"gpu": "4090"}))
    h.submit(_request("label", worker_selector={"gpu": "nowhere"}))
    h.pump()
    assert _statuses(h) == [("first", "scheduled"), ("waits", "unschedulable"),
                            ("label", "unschedulable")]
    parked = h.rt.store.parked()
    assert ParkedEntry.model_validate_json(parked["waits"]).reasons == ["insufficient_vram"]
    assert ParkedEntry.model_validate_json(parked["label"]).reasons == ["label_mismatch"]
    summary = h.event({"kind": "instance_deleted", "request_id": "first"})
    assert summary["woken"] == ["waits"]
    h.pump()
    assert _statuses(h)[-1] == ("waits", "scheduled")
    assert h.record("waits")["seq"] == "1"
    woken = h.events(["sched.request.woken"])
    assert [e.request_id for e in woken] == ["waits"] and woken[0].data["by"][0]["kind"] == "capacity_freed"


def test_label_and_readiness_changes_wake_their_parked_requests() -> None:
    h = Harness()
    h.apply(_cluster(_worker(1, "a", count=2, state="not_ready", labels={"gpu": "h100"})))
    h.submit(_request("ready-wait", worker_selector={"gpu": "h100"}))
    h.submit(_request("label-wait", worker_selector={"zone": "z"}))
    h.pump()
    reasons = {rid: ParkedEntry.model_validate_json(raw).reasons for rid, raw in h.rt.store.parked().items()}
    assert reasons == {"ready-wait": ["worker_not_ready"], "label-wait": ["label_mismatch"]}
    assert h.event({"kind": "worker_state", "worker_id": 1, "state": "ready"})["woken"] == ["ready-wait"]
    h.pump()
    summary = h.event({"kind": "worker_labels", "worker_id": 1, "labels": {"gpu": "h100", "zone": "z"}})
    assert summary["woken"] == ["label-wait"]
    h.pump()
    assert [s for _, s in _statuses(h)][-2:] == ["scheduled", "scheduled"]


def test_a_change_during_the_decision_requeues_instead_of_parking() -> None:
    h = Harness()
    h.apply(_cluster(_worker(1, "a", labels={"gpu": "h100"})))
    h.submit(_request("r", worker_selector={"gpu": "zz"}))
    item = h.queue.popleft()
    from tasks import pipeline

    step = pipeline.decide(h.rt, item.request_id, item.seq, item.attempt, "t")
    assert step is not None and step.action == "park"
    h.event({"kind": "worker_labels", "worker_id": 1, "labels": {"gpu": "zz"}})  # lands before parking
    assert pipeline.publish(h.rt, step) == "requeued"
    h.pump()
    assert _statuses(h) == [("r", "scheduled")]


def test_gpu_memory_growth_wakes_capacity_waiters() -> None:
    h = Harness()
    h.apply(_cluster(_worker(1, "a", total=8 * GIB)))
    h.submit(_request("big"))
    h.pump()
    assert _statuses(h) == [("big", "unschedulable")]
    summary = h.event({"kind": "gpu_memory_changed", "worker_id": 1,
                       "gpus": [{"type": "cuda", "index": 0, "total": H100}]})
    assert summary["woken"] == ["big"]
    h.pump()
    assert _statuses(h)[-1] == ("big", "scheduled")


def test_invalid_cluster_events_are_rejected_with_the_field() -> None:
    h = Harness()
    summary = h.event({"kind": "worker_state", "worker_id": 1, "state": "sleepy"})
    assert summary["status"] == "rejected" and summary["field"] == "state"
    assert h.event({"kind": "nope"})["status"] == "rejected"
    assert h.event({"kind": "instance_deleted"})["status"] == "rejected"
    assert h.event(["not", "a", "dict"])["status"] == "rejected"
    assert len(h.events(["sched.cluster.event_rejected"])) == 4
    assert h.event({"kind": "worker_state", "worker_id": 99, "state": "ready"})["status"] == "unknown_worker"


def test_deleting_an_instance_twice_is_harmless() -> None:
    h = Harness()
    h.apply(_cluster(_worker(1, "a")))
    h.submit(_request("r"))
    h.pump()
    assert h.event({"kind": "instance_deleted", "request_id": "r"})["status"] == "released"
    assert h.event({"kind": "instance_deleted", "request_id": "r"})["status"] == "absent"
    assert h.rt.cluster.ledger()[1] == {}


# ------------------------------------------------------------- rescheduling
def _two_workers_with_a_booking(**settings: Any) -> Harness:
    h = Harness(settings=Harness().settings.model_copy(update={
        "unreachable_grace_s": 60, "ready_stable_s": 30, **settings}))
    h.apply(_cluster(_worker(1, "a", labels={"gpu": "x"}), _worker(2, "b", labels={"gpu": "x"}),
                     _worker(3, "c", labels={"gpu": "spare"})))
    h.submit(_request("r", worker_selector={"gpu": "x"}))
    h.pump()
    return h


def _booked_worker(h: Harness, rid: str) -> int:
    meta = h.rt.cluster.instance_meta()[f"req:{rid}"]
    return meta.workers[0]


def test_a_removed_workers_instances_are_rescheduled_with_a_new_request() -> None:
    h = _two_workers_with_a_booking()
    lost = _booked_worker(h, "r")
    summary = h.event({"kind": "worker_removed", "worker_id": lost})
    assert summary["rescheduled"] == ["r~1"]
    h.pump()
    assert _statuses(h)[-1] == ("r~1", "scheduled")
    assert _booked_worker(h, "r~1") != lost
    moved = h.events(["sched.instance.rescheduled"])[0]
    assert (moved.request_id, moved.data["from_request"]) == ("r~1", "r")
    assert h.event({"kind": "worker_removed", "worker_id": lost})["status"] == "absent"


def test_unreachable_beyond_grace_reschedules_but_a_short_outage_does_not() -> None:
    h = _two_workers_with_a_booking()
    lost = _booked_worker(h, "r")
    h.event({"kind": "worker_state", "worker_id": lost, "state": "unreachable"})
    h.clock.advance(30)
    h.drain()
    h.event({"kind": "worker_state", "worker_id": lost, "state": "ready"})
    h.clock.advance(31)  # ready for longer than ready_stable_s: the outage clock resets
    h.drain()
    assert h.rt.store.record("r")["state"] == "done" and len(h.results()) == 1
    h.event({"kind": "worker_state", "worker_id": lost, "state": "unreachable"})
    h.clock.advance(59)
    h.drain()
    assert h.events(["sched.instance.rescheduled"]) == []
    h.clock.advance(2)
    h.drain()
    h.pump()
    assert _statuses(h)[-1] == ("r~1", "scheduled")


def test_a_flapping_worker_accumulates_its_outage_instead_of_restarting_the_grace() -> None:
    h = _two_workers_with_a_booking()
    lost = _booked_worker(h, "r")
    for _ in range(2):  # down 15 s, up 5 s: never ready for ready_stable_s (30 s)
        h.event({"kind": "worker_state", "worker_id": lost, "state": "unreachable"})
        h.clock.advance(15)
        h.drain()
        h.event({"kind": "worker_state", "worker_id": lost, "state": "ready"})
        h.clock.advance(5)
        h.drain()
    assert h.events(["sched.instance.rescheduled"]) == []  # no move while it flaps within the grace
    h.event({"kind": "worker_state", "worker_id": lost, "state": "unreachable"})  # t = 40 s
    h.clock.advance(19)
    h.drain()
    assert h.events(["sched.instance.rescheduled"]) == []
    h.clock.advance(2)  # 61 s since the outage began (a restarted clock would wait until 100 s)
    h.drain()
    assert [e.data["from_request"] for e in h.events(["sched.instance.rescheduled"])] == ["r"]


def test_pinned_instances_wait_on_their_gpus() -> None:
    h = Harness()
    h.apply(_cluster(_worker(1, "a"), _worker(2, "b")))
    h.submit(_request("pinned", gpu_selector={"gpu_ids": ["a:cuda:0"]}))
    h.pump()
    assert _statuses(h) == [("pinned", "scheduled")]
    h.event({"kind": "worker_state", "worker_id": 1, "state": "unreachable"})
    h.clock.advance(120)
    h.drain()
    assert h.events(["sched.instance.rescheduled"]) == []
    assert "req:pinned" in h.rt.cluster.instance_meta()  # claims kept while it waits
    removed = h.event({"kind": "worker_removed", "worker_id": 1})
    assert removed["rescheduled"] == ["pinned~1"]
    h.pump()
    assert _statuses(h)[-1] == ("pinned~1", "unschedulable")  # never moved to worker b
    reasons = ParkedEntry.model_validate_json(h.rt.store.parked()["pinned~1"]).reasons
    assert reasons == ["gpu_selector_mismatch"]
    readded = h.event({"kind": "worker_added", "worker": _worker(1, "a")})
    assert readded["woken"] == ["pinned~1"]
    h.pump()
    assert _statuses(h)[-1] == ("pinned~1", "scheduled")


def test_rescheduling_is_suspended_when_most_workers_are_down() -> None:
    h = _two_workers_with_a_booking(max_unreachable_fraction=0.5)
    lost = _booked_worker(h, "r")
    for wid in (1, 2, 3):
        h.event({"kind": "worker_state", "worker_id": wid, "state": "unreachable"})
    h.clock.advance(61)
    h.drain()
    assert h.events(["sched.instance.rescheduled"]) == []
    assert len(h.events(["sched.reschedule.suspended"])) == 3
    for wid in {1, 2, 3} - {lost}:
        h.event({"kind": "worker_state", "worker_id": wid, "state": "ready"})
    h.clock.advance(61)
    h.drain()
    assert [e.data["from_request"] for e in h.events(["sched.instance.rescheduled"])] == ["r"]


def test_control_plane_instances_on_a_lost_worker_are_reported_not_moved() -> None:
    h = Harness()
    row = {"id": 5, "name": "cp", "worker_id": 1, "gpu_type": "cuda", "gpu_indexes": [0],
           "computed_resource_claim": {"vram": {"0": GIB}}}
    h.apply({"workers": [_worker(1, "a"), _worker(2, "b")], "model_instances": [row]})
    h.event({"kind": "worker_state", "worker_id": 1, "state": "unreachable"})
    h.clock.advance(61)
    h.drain()
    lost = h.events(["sched.instance.lost"])
    assert [e.data["instance_key"] for e in lost] == ["id:5"]
    assert "id:5" in h.rt.cluster.instance_meta()


@pytest.mark.parametrize("kind", ["worker_added", "worker_updated"])
def test_worker_upserts_record_full_rows(kind: str) -> None:
    h = Harness()
    h.apply(_cluster(_worker(1, "a")))
    summary = h.event({"kind": kind, "worker": _worker(2, "b", count=2)})
    assert summary["status"] == "applied"
    fold = h.rt.mirror.sync()
    assert sorted(fold.workers) == [1, 2] and len(fold.workers[2].status.gpu_devices) == 2  # type: ignore[union-attr, arg-type]
