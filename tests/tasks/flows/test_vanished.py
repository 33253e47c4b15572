"""Workers that left count as down for the mass-outage guard; bookings they held wait behind it."""

from __future__ import annotations

import copy

import pytest
from service_builders import small_request, uniform_cluster

from tasks.flows.cluster_changes import apply_snapshot
from tasks.flows.vanished import outage_share, recently_vanished
from tasks.intake.snapshots import InvalidField, parse_snapshot
from tasks.state.cluster_store import RemovalRefused
from tasks.testing import Harness, isolated_settings


def _full(h: Harness, workers: int = 4) -> tuple[dict[str, object], list[str]]:
    snapshot = uniform_cluster(workers, 1)
    h.apply(snapshot)
    ids = [f"r{n}" for n in range(workers)]
    for rid in ids:
        h.submit(small_request(rid))
    h.pump()
    return snapshot, ids


def test_a_snapshot_without_its_keys_is_refused_naming_them() -> None:
    for document, field in (({}, "workers"), ({"workers": []}, "model_instances"),
                            ({"model_instances": []}, "workers")):
        with pytest.raises(InvalidField) as refused:
            parse_snapshot(document)
        assert refused.value.field == field and "required key missing" in refused.value.message


def test_removing_more_than_the_fraction_needs_confirmation(h: Harness) -> None:
    snapshot, _ = _full(h)
    version = h.rt.cluster.version()
    one = {"workers": snapshot["workers"][:1], "model_instances": []}  # type: ignore[index]
    with pytest.raises(RemovalRefused, match="removes 3 of the 4 workers"):
        h.rt.cluster.apply_snapshot(one)
    assert h.rt.cluster.version() == version and h.rt.client.hlen(h.rt.keys.vanished) == 0
    half = {"workers": snapshot["workers"][:2], "model_instances": []}  # type: ignore[index]
    h.rt.cluster.apply_snapshot(half)  # 2 of 4: not more than 0.5
    assert recently_vanished(h.rt) == 2
    h.rt.cluster.apply_snapshot(one, allow_removal=True)
    assert recently_vanished(h.rt) == 3


def test_vanished_workers_count_as_down_until_the_grace_passes() -> None:
    h = Harness(settings=isolated_settings(unreachable_grace_s=60))
    snapshot, _ = _full(h)
    h.rt.cluster.apply_snapshot({"workers": snapshot["workers"][:2], "model_instances": []})  # type: ignore[index]
    workers = h.rt.mirror.sync().worker_list()
    assert outage_share(h.rt, workers) == (0, 2, 4)
    h.clock.advance(61)
    assert outage_share(h.rt, workers) == (0, 0, 2)
    h.event({"kind": "worker_added", "worker": snapshot["workers"][2]})  # type: ignore[index]
    h.event({"kind": "worker_removed", "worker_id": 1})
    assert recently_vanished(h.rt) == 1


def test_bookings_of_a_mass_removal_wait_and_are_booked_again_if_their_workers_return() -> None:
    h = Harness(settings=isolated_settings(unreachable_grace_s=60))
    snapshot, ids = _full(h)
    before = {m.request_id: m.workers for m in h.rt.cluster.instance_meta().values()}
    partial = copy.deepcopy(snapshot)
    partial["workers"] = partial["workers"][:2]  # type: ignore[index]
    partial["workers"][1]["state"] = "unreachable"  # type: ignore[index]
    summary = h.apply(partial)  # 2 vanished + 1 down of 4: above 0.5
    assert summary["rescheduled"] == []
    (held,) = h.events(["sched.reschedule.suspended"])
    assert (held.data["vanished"], held.data["down"], held.data["bookings"]) == (2, 1, 2)
    h.apply(snapshot)  # they are back before the grace passed
    h.clock.advance(61)
    h.drain()
    assert {m.request_id: m.workers for m in h.rt.cluster.instance_meta().values()} == before
    assert not [rid for rid in ids if h.rt.client.exists(h.rt.keys.request(f"{rid}~1"))]


def test_a_confirmed_removal_reschedules_at_once(h: Harness) -> None:
    snapshot, _ = _full(h)
    one = {"workers": snapshot["workers"][:1], "model_instances": []}  # type: ignore[index]
    moved = [str(m.request_id) for m in h.rt.cluster.instance_meta().values() if m.workers != (1,)]
    summary = apply_snapshot(h.rt, one, allow_removal=True)
    assert sorted(summary["rescheduled"]) == sorted(f"{rid}~1" for rid in moved)
