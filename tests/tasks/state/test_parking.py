"""Parking reasons and wake rules: which change wakes which parked request."""

from __future__ import annotations

from typing import Any

from builders import GIB, RTX_4090, instance
from service_builders import worker_row

from scheduler_core import DEFAULT_CHAIN, ModelInstance, ScheduleResult, Worker
from tasks.state.parking import (
    Change,
    ParkedEntry,
    blocking_reasons,
    gpu_shares,
    parked_json,
    slots,
    wake_plan,
    wake_table,
    wake_targets,
)
from tasks.state.parking import woken_by as _woken_by


def woken_by(entry: ParkedEntry, change: Change) -> bool:
    return _woken_by(entry, change, DEFAULT_CHAIN)


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
    kw.setdefault("cluster_id", 1)  # the workers' cluster (builders.worker)
    return ParkedEntry(seq=0, reasons=reasons, **kw)


def _w(**kw: Any) -> Worker:
    return Worker.model_validate(worker_row(7, kw.pop("name", "w7"), **kw))


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
    entry = _entry(["gpu_selector_mismatch"], gpu_ids=["w7:cuda:0"])
    assert woken_by(entry, Change("worker_added", (_w(name="w7"),)))
    assert not woken_by(entry, Change("worker_added", (_w(name="w8"),)))


def test_wake_targets_are_sorted_and_carry_the_parked_seq() -> None:
    parked = {
        "b": parked_json(ParkedEntry(seq=2, reasons=["insufficient_vram"], cluster_id=1)),
        "a": parked_json(ParkedEntry(seq=0, reasons=["insufficient_vram"], cluster_id=1)),
        "c": parked_json(ParkedEntry(seq=0, reasons=["label_mismatch"], cluster_id=1)),
    }
    assert wake_targets(parked, [Change("capacity_freed", (_w(),))], DEFAULT_CHAIN) == [("a", 0), ("b", 2)]


def test_wake_rules_are_the_plugins_declarations_plus_the_services_reasons() -> None:
    """Rule: the table is derived from the chain (kube's EventsToRegister): a filter's reason is
    cleared by the changes its filter declares, capacity changes clear the strategies' and the
    service's reasons, a snapshot clears everything, and a static reason only a snapshot clears."""
    table = wake_table(DEFAULT_CHAIN)
    assert table["worker_ready"] >= {"worker_not_ready", "insufficient_vram", "overcommit", "no_candidate"}
    assert "label_mismatch" not in table["worker_ready"]
    assert table["labels_changed"] >= {"label_mismatch", "overcommit_not_allowed"}
    assert "heterogeneous_gpus" in table["snapshot"]
    assert all("heterogeneous_gpus" not in reasons for kind, reasons in table.items() if kind != "snapshot")
    freed = table["capacity_freed"]
    assert freed >= {"conflict_retries_exhausted", "tp_not_divisible", "no_worker_combination"}


def test_a_model_without_cluster_waits_for_workers_without_one() -> None:
    """Rule: the cluster filter runs even for a model without a cluster (None matches None only)."""
    entry = _entry(["insufficient_vram"], cluster_id=None)
    assert not woken_by(entry, Change("capacity_freed", (_w(cluster_id=1),)))
    assert woken_by(entry, Change("capacity_freed", (_w(cluster_id=None),)))


# ------------------------------------------------------------- freed capacity: floors and slots
def _freed(*shares: tuple[str | None, float], version: int = 0) -> Change:
    return Change("capacity_freed", (_w(),), version, shares)


def test_a_gpus_share_is_its_capacity_less_the_claims_over_its_total() -> None:
    worker = Worker.model_validate(worker_row(7, "w7", 2))
    quarter = RTX_4090 // 4
    held = [ModelInstance.model_validate(instance(1, 7, {0: quarter}))]
    assert gpu_shares(worker, held) == (("cuda", (RTX_4090 - quarter) / RTX_4090), ("cuda", 1.0))
    other = [ModelInstance.model_validate(instance(2, 8, {0: quarter}))]  # on another worker
    assert gpu_shares(worker, other) == (("cuda", 1.0), ("cuda", 1.0))


def test_freed_capacity_wakes_only_requests_whose_floor_a_freed_gpu_reaches() -> None:
    entry = _entry(["insufficient_vram"], floor={"cuda": 0.8})
    assert not woken_by(entry, _freed(("cuda", 0.75)))
    assert woken_by(entry, _freed(("cuda", 0.75), ("cuda", 0.8)))
    assert woken_by(entry, _freed(("rocm", 0.1)))  # a type it has no floor for: cannot rule out
    assert woken_by(_entry(["insufficient_vram"]), _freed(("cuda", 0.1)))  # no floor recorded
    assert woken_by(entry, Change("capacity_freed", (_w(),)))  # shares unknown
    assert woken_by(entry, Change("capacity_increased", (_w(),)))  # floors speak of freed claims only


def test_a_request_decided_at_or_after_a_change_is_not_woken_by_it() -> None:
    entry = _entry(["insufficient_vram"], decided_version=5)
    assert not woken_by(entry, _freed(("cuda", 1.0), version=5))
    assert woken_by(entry, _freed(("cuda", 1.0), version=6))
    assert woken_by(entry, _freed(("cuda", 1.0)))  # version unknown


def test_a_freed_gpu_holds_as_many_requests_as_its_share_fits_the_smallest_floor() -> None:
    entries = [_entry(["insufficient_vram"], floor={"cuda": f}) for f in (0.8, 0.45)]
    assert slots(entries, [_freed(("cuda", 1.0), ("cuda", 0.9))]) == 2 + 2
    assert slots(entries[:1], [_freed(("cuda", 1.0), ("cuda", 0.9))]) == 1 + 1
    assert slots(entries[:1], [_freed(("cuda", 0.5))]) == 0


def test_freed_slots_go_to_the_requests_parked_first_and_the_rest_wait() -> None:
    def parked(ms: int, **kw: Any) -> str:
        return parked_json(_entry(["insufficient_vram"], parked_ms=ms, **kw))

    waiting = {"a": parked(30, floor={"cuda": 0.8}), "b": parked(10, floor={"cuda": 0.8}),
               "c": parked(20, floor={"cuda": 0.8}), "d": parked(40)}
    one = wake_plan(waiting, [_freed(("cuda", 1.0), version=9)], DEFAULT_CHAIN)
    assert (one.targets, one.deferred) == ([("b", 0), ("d", 0)], 2)  # d has no floor: always woken
    two = wake_plan(waiting, [_freed(("cuda", 1.0), ("cuda", 0.95), version=9)], DEFAULT_CHAIN)
    assert (two.targets, two.deferred) == ([("b", 0), ("c", 0), ("d", 0)], 1)
    rocm = _freed(("cuda", 1.0), ("rocm", 1.0), version=9)  # no floor for rocm: cannot be bounded
    every = wake_plan(waiting, [rocm], DEFAULT_CHAIN)
    assert (every.targets, every.deferred) == ([("a", 0), ("b", 0), ("c", 0), ("d", 0)], 0)
    unversioned = wake_plan(waiting, [_freed(("cuda", 1.0))], DEFAULT_CHAIN)  # could not be re-checked
    assert (unversioned.targets, unversioned.deferred) == ([("a", 0), ("b", 0), ("c", 0), ("d", 0)], 0)


# ------------------------------------------------- freed capacity: floors in bytes (precise)
def _freed_bytes(*frees: int, version: int = 9) -> Change:
    return Change("capacity_freed", (_w(),), version, tuple(("cuda", 1.0) for _ in frees), frees)


def test_a_floor_in_bytes_wakes_only_for_a_gpu_that_frees_that_much_whatever_its_type() -> None:
    """Issue 17, item 8: one release woke all 1,000 parked precise requests (no floor was known);
    a precise request records the bytes a GPU needs (scheduler_core.wake_floor)."""
    entry = _entry(["weights_do_not_fit"], floor_bytes=20 * GIB)
    assert not woken_by(entry, _freed_bytes(19 * GIB, 4 * GIB))
    assert woken_by(entry, _freed_bytes(19 * GIB, 20 * GIB))
    assert woken_by(entry, Change("capacity_freed", (_w(),), 9, (("cuda", 1.0),)))  # bytes unknown
    assert woken_by(_entry(["weights_do_not_fit"], floor_bytes=0), _freed_bytes(0))  # 0 rules nothing out


def test_freed_bytes_hold_as_many_precise_requests_as_the_smallest_floor_fits() -> None:
    def parked(ms: int, **kw: Any) -> str:
        return parked_json(_entry(["weights_do_not_fit"], parked_ms=ms, **kw))

    waiting = {f"p{n}": parked(n, floor_bytes=20 * GIB) for n in range(10)}
    waiting |= {"g": parked(100, floor={"cuda": 0.8}), "h": parked(101, floor={"cuda": 0.8})}
    plan = wake_plan(waiting, [_freed_bytes(24 * GIB, 41 * GIB)], DEFAULT_CHAIN)
    # 24 GiB holds one request (a 0.8 share is 19.2 GiB of it, a precise rank 20 GiB) and 41 GiB
    # two (20 GiB each): both kinds draw on the same bytes, three slots in all, oldest first
    assert plan.targets == [("p0", 0), ("p1", 0), ("p2", 0)]
    assert plan.deferred == 9
    assert slots([_entry([], floor_bytes=20 * GIB)], [_freed_bytes(24 * GIB, 41 * GIB)]) == 3
    older_gpustack = waiting | {"g": parked(-1, floor={"cuda": 0.8})}
    assert wake_plan(older_gpustack, [_freed_bytes(24 * GIB, 41 * GIB)], DEFAULT_CHAIN).targets == [
        ("g", 0), ("p0", 0), ("p1", 0)]
