"""Parking and waking: announced once, requeued on a change, woken only at the parked seq."""

from __future__ import annotations

import json

from record_steps import decided, park

from tasks.testing import Harness


def test_park_announces_unschedulable_once_per_request(h: Harness) -> None:
    decided(h)
    outcome, notice = park(h, "r1", 0)
    assert outcome == "parked" and notice
    assert park(h, "r1", 0)[0] == "duplicate"
    woken = h.rt.parked.wake([("r1", 0)], {"by": "test"}, 7)
    assert woken == [("r1", 1)]
    h.rt.partition.call(h.rt.records.begin_call("r1", 1, 0, "t"))
    # parks once decided
    h.rt.partition.call(
        h.rt.records.record_decision_call("r1", 1, 0, 0, '{"status":"unschedulable"}', "d", "{}")
    )
    assert park(h, "r1", 1) == ("parked", "")  # parked again, not announced again
    assert [r["status"] for r in h.results()] == ["unschedulable"]
    assert h.results()[0]["terminal"] == "0"


def test_park_without_announcement_for_contended_requests(h: Harness) -> None:
    decided(h)
    assert park(h, "r1", 0, announce=False) == ("parked", "")
    assert h.results() == []


def test_park_requeues_when_the_cluster_changed_during_the_decision(h: Harness) -> None:
    decided(h)
    h.rt.client.set(h.rt.keys.epoch, 3)
    assert park(h, "r1", 0, epoch=2) == ("requeued", "1")
    record = h.record("r1")
    assert (record["state"], record["seq"], record["attempt"]) == ("woken", "1", "0")
    assert h.rt.client.zscore(h.rt.keys.outbox, "r1|1|0") == 5
    assert h.rt.client.hlen(h.rt.keys.parked) == 0


def test_wake_only_moves_requests_still_parked_at_that_seq(h: Harness) -> None:
    for rid in ("a", "b"):
        decided(h, rid)
        park(h, rid, 0)
    assert h.rt.parked.wake([("a", 0), ("b", 5), ("zz", 0)], {"by": "x"}, 9) == [("a", 1)]
    assert set(h.rt.parked.entries()) == {"b"}
    assert h.rt.client.zscore(h.rt.keys.outbox, "a|1|0") == 9


def test_a_contended_park_arms_its_retry_timer_in_the_same_step(h: Harness) -> None:
    decided(h)
    outcome = h.rt.partition.call(h.rt.parked.park_call(
        "r1",
        0,
        0,
        result_digest="d",
        parked_entry=json.dumps({"seq": 0, "reasons": ["x"]}),
        notice_json="",
        event_data="{}",
        epoch=0,
        requeue_due_ms=5,
        announce=False,
        retry_timer=("retry:r1|0", 4242),
    ))
    assert outcome == ("parked", "")
    assert h.rt.client.zscore(h.rt.keys.timers, "retry:r1|0") == 4242
