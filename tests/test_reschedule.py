"""Parking with reason codes, wake rules, rescheduling on lost workers, hysteresis, pins."""

from __future__ import annotations

from typing import Any

import pytest
from builders import GIB, H100, RTX_4090, model, uniform_worker

from scheduler_core import ScheduleResult, Worker
from tasks.decision.decide import decide
from tasks.decision.publish import publish
from tasks.state.followups import run_followup
from tasks.state.parking import Change, ParkedEntry, blocking_reasons, parked_json, wake_targets, woken_by
from tasks.state.timers import read_health
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


def _assert_rescheduled_after_grace(h: Harness) -> None:
    """Not rescheduled 59 s into the 60 s grace; rescheduled and placed as r~1 just after it."""
    h.clock.advance(59)
    h.drain()
    assert h.events(["sched.instance.rescheduled"]) == []
    h.clock.advance(2)
    h.drain()
    h.pump()
    assert _statuses(h)[-1] == ("r~1", "scheduled")


# ------------------------------------------------------------------- reasons
def test_reasons_come_from_the_blocking_filter_or_the_strategies() -> None:
    events = [
        {"level": "info", "action": "a", "message": "m", "reason": "tp_not_divisible"},
        {"level": "info", "action": "b", "message": "m", "reason": "insufficient_vram"},
    ]
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
    h.submit(
        _request("first", env={"GPUSTACK_MODEL_VRAM_CLAIM": str(20 * GIB)}, worker_selector={"gpu": "4090"})
    )
    h.submit(
        _request("waits", env={"GPUSTACK_MODEL_VRAM_CLAIM": str(20 * GIB)}, worker_selector={"gpu": "4090"})
    )
    h.submit(_request("label", worker_selector={"gpu": "nowhere"}))
    h.pump()
    assert _statuses(h) == [("first", "scheduled"), ("waits", "unschedulable"), ("label", "unschedulable")]
    parked = h.rt.parked.entries()
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
    parked = h.rt.parked.entries()
    reasons = {rid: ParkedEntry.model_validate_json(raw).reasons for rid, raw in parked.items()}
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
    step = decide(h.rt, item.request_id, item.seq, item.attempt, "t")
    assert step is not None and step.action == "park"
    h.event({"kind": "worker_labels", "worker_id": 1, "labels": {"gpu": "zz"}})  # lands before parking
    assert publish(h.rt, step) == "requeued"
    h.pump()
    assert _statuses(h) == [("r", "scheduled")]


def test_gpu_memory_growth_wakes_capacity_waiters() -> None:
    h = Harness()
    h.apply(_cluster(_worker(1, "a", total=8 * GIB)))
    h.submit(_request("big"))
    h.pump()
    assert _statuses(h) == [("big", "unschedulable")]
    summary = h.event(
        {"kind": "gpu_memory_changed", "worker_id": 1, "gpus": [{"type": "cuda", "index": 0, "total": H100}]}
    )
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
    h = Harness(
        settings=Harness().settings.model_copy(
            update={"unreachable_grace_s": 60, "ready_stable_s": 30, **settings}
        )
    )
    h.apply(
        _cluster(
            _worker(1, "a", labels={"gpu": "x"}),
            _worker(2, "b", labels={"gpu": "x"}),
            _worker(3, "c", labels={"gpu": "spare"}),
        )
    )
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
    assert h.rt.records.record("r")["state"] == "done" and len(h.results()) == 1
    h.event({"kind": "worker_state", "worker_id": lost, "state": "unreachable"})
    _assert_rescheduled_after_grace(h)


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
    reasons = ParkedEntry.model_validate_json(h.rt.parked.entries()["pinned~1"]).reasons
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
    row = {
        "id": 5,
        "name": "cp",
        "worker_id": 1,
        "gpu_type": "cuda",
        "gpu_indexes": [0],
        "computed_resource_claim": {"vram": {"0": GIB}},
    }
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


# ------------------------------------------- follow-ups survive their caller
def test_a_removal_whose_caller_died_is_rescheduled_by_the_drainer() -> None:
    h = _two_workers_with_a_booking()
    lost = _booked_worker(h, "r")
    h.rt.cluster.remove_worker(lost, "worker_removed")  # the script ran; its caller died
    assert h.event({"kind": "worker_removed", "worker_id": lost})["status"] == "absent"  # redelivered
    h.clock.advance(h.settings.outbox_lease_s + 1)
    assert h.drain()["followups"] == 1
    h.pump()
    assert _statuses(h)[-1] == ("r~1", "scheduled")
    assert h.rt.client.zcard(h.rt.keys.followups) == 0 and h.rt.client.hlen(h.rt.keys.followup_jobs) == 0
    assert h.drain()["followups"] == 0


def test_a_retried_script_whose_reply_was_lost_still_does_its_follow_up() -> None:
    h = _two_workers_with_a_booking()
    lost = _booked_worker(h, "r")
    real = h.rt.cluster.remove_worker

    def reply_lost_then_retried(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)  # applied, but the reply never arrived ...
        return real(*args, **kwargs)  # ... so redis-py sent the same script (same event id) again

    h.rt.cluster.remove_worker = reply_lost_then_retried  # type: ignore[method-assign]
    summary = h.event({"kind": "worker_removed", "worker_id": lost})
    assert summary["status"] == "absent" and summary["rescheduled"] == ["r~1"]
    h.pump()
    assert _statuses(h)[-1] == ("r~1", "scheduled")


def test_a_freed_gpu_wakes_its_waiters_even_if_the_caller_died() -> None:
    h = Harness()
    h.apply(_cluster(_worker(1, "a")))
    h.submit(_request("first", env={"GPUSTACK_MODEL_VRAM_CLAIM": str(20 * GIB)}))
    h.submit(_request("waits", env={"GPUSTACK_MODEL_VRAM_CLAIM": str(20 * GIB)}))
    h.pump()
    h.rt.cluster.release(["req:first"], "instance_deleted", wake="capacity_freed")  # caller died
    assert h.event({"kind": "instance_deleted", "request_id": "first"})["status"] == "absent"
    h.clock.advance(h.settings.outbox_lease_s + 1)
    h.drain()
    h.pump()
    assert _statuses(h)[-1] == ("waits", "scheduled")


def test_a_rescheduling_follow_up_run_twice_reschedules_once() -> None:
    h = _two_workers_with_a_booking()
    meta = h.rt.partition.meta()
    h.rt.cluster.remove_worker(_booked_worker(h, "r"), "worker_removed", meta=meta)
    job = h.rt.client.hget(h.rt.keys.followup_jobs, meta.event_id)
    assert run_followup(h.rt, meta.event_id)["rescheduled"] == ["r~1"]
    h.rt.client.hset(h.rt.keys.followup_jobs, meta.event_id, job)  # e.g. the drainer's leased copy
    assert run_followup(h.rt, meta.event_id)["rescheduled"] == ["r~1"]  # found, not redone
    assert len(h.events(["sched.request.received"])) == 2  # r and r~1 only
    assert len(h.events(["sched.instance.rescheduled"])) == 1


# ---------------------------------------------------- outage clocks in Lua
def test_a_redelivered_state_event_keeps_the_outage_clock_it_started() -> None:
    h = _two_workers_with_a_booking()
    lost = _booked_worker(h, "r")
    current = h.rt.cluster.worker_row(lost)
    down = Worker.model_validate_json(current or "").model_copy(update={"state": "unreachable"})
    h.rt.cluster.upsert_worker(down, current, {"kind": "worker_state"})  # applied; the caller died
    again = h.event({"kind": "worker_state", "worker_id": lost, "state": "unreachable"})
    assert again["status"] == "unchanged"
    h.clock.advance(61)
    h.drain()
    h.pump()
    assert [e.data["from_request"] for e in h.events(["sched.instance.rescheduled"])] == ["r"]


def test_a_snapshot_reporting_a_worker_down_starts_its_outage_clock() -> None:
    h = _two_workers_with_a_booking()
    lost = _booked_worker(h, "r")
    rows = [
        _worker(1, "a", labels={"gpu": "x"}),
        _worker(2, "b", labels={"gpu": "x"}),
        _worker(3, "c", labels={"gpu": "spare"}),
    ]
    rows[lost - 1] = {**rows[lost - 1], "state": "unreachable"}
    h.apply({"workers": rows, "model_instances": []})
    health = h.events(["sched.worker.health"])
    assert [(e.data["worker_id"], e.data["state"]) for e in health] == [(lost, "unreachable")]
    _assert_rescheduled_after_grace(h)


def test_a_snapshot_reporting_a_worker_ready_again_restarts_its_hysteresis() -> None:
    h = _two_workers_with_a_booking()
    lost = _booked_worker(h, "r")
    rows = [
        _worker(1, "a", labels={"gpu": "x"}),
        _worker(2, "b", labels={"gpu": "x"}),
        _worker(3, "c", labels={"gpu": "spare"}),
    ]
    h.event({"kind": "worker_state", "worker_id": lost, "state": "unreachable"})
    h.clock.advance(10)
    h.drain()
    h.apply({"workers": rows, "model_instances": []})  # the control plane says: ready again
    h.clock.advance(31)  # ready for longer than ready_stable_s: the outage clock resets
    h.drain()
    assert read_health(h.rt, lost).down_since_ms is None
    h.event({"kind": "worker_state", "worker_id": lost, "state": "unreachable"})
    h.clock.advance(50)  # a new outage, shorter than the grace
    h.drain()
    assert h.events(["sched.instance.rescheduled"]) == []


def test_a_vanished_worker_loses_its_clocks() -> None:
    h = _two_workers_with_a_booking()
    h.event({"kind": "worker_state", "worker_id": 3, "state": "unreachable"})
    assert h.rt.client.zscore(h.rt.keys.timers, "grace:3") is not None
    h.apply(_cluster(_worker(1, "a", labels={"gpu": "x"}), _worker(2, "b", labels={"gpu": "x"})))
    assert h.rt.client.hget(h.rt.keys.health, "3") is None
    assert h.rt.client.zscore(h.rt.keys.timers, "grace:3") is None


# ------------------------------------------------------------- wake epoch
def test_changes_that_cannot_unblock_do_not_requeue_a_decision() -> None:
    h = Harness()
    h.apply(_cluster(_worker(1, "a"), _worker(2, "b")))
    h.submit(_request("big", env={"GPUSTACK_MODEL_VRAM_CLAIM": str(100 * GIB)}))
    epoch = h.rt.client.get(h.rt.keys.epoch)
    for state in ("unreachable", "not_ready"):  # a worker going (further) down unblocks nothing
        h.event({"kind": "worker_state", "worker_id": 2, "state": state})
    h.event({"kind": "worker_removed", "worker_id": 2})
    assert h.rt.client.get(h.rt.keys.epoch) == epoch
    item = h.queue.popleft()
    step = decide(h.rt, item.request_id, item.seq, item.attempt, "t")
    h.event({"kind": "worker_labels", "worker_id": 1, "labels": {"os": "linux"}})  # the same labels
    assert step is not None and publish(h.rt, step) == "parked"
    assert h.events(["sched.request.woken"]) == []
    h.event({"kind": "worker_labels", "worker_id": 1, "labels": {"zone": "z"}})  # can unblock
    assert h.rt.client.get(h.rt.keys.epoch) != epoch


# --------------------------------------------------- reschedule identities
def test_rescheduled_ids_never_collide_with_submitted_ones() -> None:
    h = _two_workers_with_a_booking()
    h.submit(_request("r~1", worker_selector={"gpu": "spare"}))  # a user chose this id
    h.pump()
    h.event({"kind": "instance_deleted", "request_id": "r~1"})
    summary = h.event({"kind": "worker_removed", "worker_id": _booked_worker(h, "r")})
    assert summary["rescheduled"] == ["r~2"]
    h.pump()
    assert _statuses(h)[-1] == ("r~2", "scheduled")
    assert h.record("r~2")["reschedule_of"].startswith("req:r@")


# ------------------------------------------------------------ bad events
def test_invalid_snapshot_events_are_rejected_naming_the_row() -> None:
    h = Harness()
    bad = h.event({"kind": "snapshot", "workers": [{"id": "x"}]})
    assert (bad["status"], bad["field"]) == ("rejected", "workers.0.id")
    twice = [_worker(1, "a"), _worker(1, "b")]
    dup = h.event({"kind": "snapshot", "workers": twice})
    assert (dup["status"], dup["field"]) == ("rejected", "workers.1.id")
    assert [e.data["field"] for e in h.events(["sched.cluster.event_rejected"])] == [
        "workers.0.id",
        "workers.1.id",
    ]
    assert h.rt.cluster.version() == 0


def test_gpu_memory_changes_must_name_the_workers_gpus() -> None:
    h = Harness()
    h.apply(_cluster(_worker(1, "a", total=8 * GIB)))
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


def test_a_snapshot_reports_gpus_booked_past_their_capacity() -> None:
    h = Harness()
    busy = {
        "workers": [_worker(1, "a", total=40 * GIB)],
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
    h.apply({**busy, "workers": [_worker(1, "a", total=20 * GIB)]})
    (over,) = h.events(["sched.ledger.overbooked"])
    assert over.data == {
        "worker_id": 1,
        "gpus": [{"gpu": "1:cuda:0", "booked": 30 * GIB, "capacity": 20 * GIB}],
    }
