"""Request records: accepted once, one attempt claimed, the first decision recorded wins."""

from __future__ import annotations

import json

from record_steps import (
    accept,
    booking,
    event_types,
    park,
    recorded_step,
    reserve_booking,
    set_capacity,
)

from tasks.testing import Harness


def test_accept_records_once_and_logs_duplicates(h: Harness) -> None:
    first = accept(h, outbox_due_ms=123)
    second = accept(h)
    assert first.accepted and not second.accepted  # type: ignore[attr-defined]
    assert second.state == "queued"  # type: ignore[attr-defined]
    assert event_types(h) == ["sched.request.received", "sched.request.duplicate"]
    assert h.rt.client.zscore(h.rt.keys.outbox, "r1|0|0") == 123


def test_accept_redelivery_of_the_intake_message_is_not_a_duplicate_submission(h: Harness) -> None:
    accept(h, intake_task="t-1")
    again = accept(h, intake_task="t-1")
    assert not again.accepted and again.intake_task == "t-1"  # type: ignore[attr-defined]
    assert event_types(h) == ["sched.request.received"]


def test_begin_claims_only_the_current_attempt(h: Harness) -> None:
    accept(h)
    assert h.rt.partition.call(h.rt.records.begin_call("missing", 0, 0, "t")).status == "missing"
    assert h.rt.partition.call(h.rt.records.begin_call("r1", 0, 1, "t")).status == "stale"
    begun = h.rt.partition.call(h.rt.records.begin_call("r1", 0, 0, "t"))
    assert begun.status == "ok" and json.loads(begun.request_json or "{}") == {"request_id": "r1"}
    assert h.record("r1")["state"] == "deciding"
    # a redelivered decision may redo it
    assert h.rt.partition.call(h.rt.records.begin_call("r1", 0, 0, "t2")).status == "ok"


def test_record_decision_refuses_a_superseded_attempt(h: Harness) -> None:
    accept(h)
    h.rt.partition.call(h.rt.records.begin_call("r1", 0, 0, "t"))
    assert not h.rt.partition.call(h.rt.records.record_decision_call("r1", 0, 1, 1, "{}", "d", "{}"))
    assert h.rt.partition.call(h.rt.records.record_decision_call("r1", 0, 0, 1, '{"x":1}', "d", "{}"))
    assert h.record("r1")["result"] == '{"x":1}'


def test_the_first_decision_recorded_for_an_attempt_wins(h: Harness) -> None:
    accept(h)
    h.rt.partition.call(h.rt.records.begin_call("r1", 0, 0, "t1"))
    h.rt.partition.call(h.rt.records.begin_call("r1", 0, 0, "t2"))  # a second decider of the same attempt
    records = h.rt.records
    first = records.record_decision_call("r1", 0, 0, 1, '{"x":1}', "d", "{}", recorded_step())
    assert h.rt.partition.call(first)
    second = h.rt.partition.call(records.record_decision_call("r1", 0, 0, 2, '{"x":2}', "d2", "{}", "{}"))
    assert not second and second.earlier is not None
    assert (second.earlier.state, second.earlier.step_json) == ("decided", recorded_step())
    record = h.record("r1")
    assert (record["result"], record["result_digest"], record["decided_version"]) == ('{"x":1}', "d", "1")
    assert len(h.events(["sched.decision.made"])) == 1
    # a later delivery continues with the recorded step
    resumed = h.rt.partition.call(h.rt.records.begin_call("r1", 0, 0, "t3"))
    assert resumed.status == "resume" and resumed.recorded == second.earlier
    assert h.record("r1")["state"] == "decided"


def test_a_booked_attempt_resumes_and_a_parked_one_is_skipped(h: Harness) -> None:
    set_capacity(h, **{"1_cuda_0": 100})
    accept(h)
    h.rt.partition.call(h.rt.records.begin_call("r1", 0, 0, "t"))
    h.rt.partition.call(h.rt.records.record_decision_call("r1", 0, 0, 0, "{}", "d", "{}", recorded_step()))
    assert reserve_booking(h, booking({"1:cuda:0": 1})).status == "booked"
    begun = h.rt.partition.call(h.rt.records.begin_call("r1", 0, 0, "t2"))
    assert begun.status == "resume" and begun.recorded is not None and begun.recorded.state == "booked"
    accept(h, "r2")
    h.rt.partition.call(h.rt.records.begin_call("r2", 0, 0, "t"))
    record = h.rt.records.record_decision_call("r2", 0, 0, 0, "{}", "d", "{}", recorded_step("r2"))
    h.rt.partition.call(record)
    park(h, "r2", 0)
    assert h.rt.partition.call(h.rt.records.begin_call("r2", 0, 0, "t2")).status == "skip"
