"""Request-lifecycle Lua scripts on fakeredis: each guard and each exactly-once rule."""

from __future__ import annotations

import json

import pytest

from tasks.state.cluster_store import Booking, Reserved
from tasks.state.delays import REDRIVE_DOUBLINGS, outbox_member, parse_outbox_member
from tasks.testing import Harness


@pytest.fixture
def h() -> Harness:
    return Harness()


def _accept(h: Harness, rid: str = "r1", **kwargs: object) -> object:
    return h.rt.records.accept(rid, json.dumps({"request_id": rid}), "digest", **kwargs)  # type: ignore[arg-type]


def _types(h: Harness) -> list[str]:
    return [event.type for event in h.events()]


def test_accept_records_once_and_logs_duplicates(h: Harness) -> None:
    first = _accept(h, outbox_due_ms=123)
    second = _accept(h)
    assert first.accepted and not second.accepted  # type: ignore[attr-defined]
    assert second.state == "queued"  # type: ignore[attr-defined]
    assert _types(h) == ["sched.request.received", "sched.request.duplicate"]
    assert h.rt.client.zscore(h.rt.keys.outbox, "r1|0|0") == 123


def test_accept_redelivery_of_the_intake_message_is_not_a_duplicate_submission(h: Harness) -> None:
    _accept(h, intake_task="t-1")
    again = _accept(h, intake_task="t-1")
    assert not again.accepted and again.intake_task == "t-1"  # type: ignore[attr-defined]
    assert _types(h) == ["sched.request.received"]


def test_begin_claims_only_the_current_attempt(h: Harness) -> None:
    _accept(h)
    assert h.rt.partition.call(h.rt.records.begin_call("missing", 0, 0, "t")).status == "missing"
    assert h.rt.partition.call(h.rt.records.begin_call("r1", 0, 1, "t")).status == "stale"
    begun = h.rt.partition.call(h.rt.records.begin_call("r1", 0, 0, "t"))
    assert begun.status == "ok" and json.loads(begun.request_json or "{}") == {"request_id": "r1"}
    assert h.record("r1")["state"] == "deciding"
    # a redelivered decision may redo it
    assert h.rt.partition.call(h.rt.records.begin_call("r1", 0, 0, "t2")).status == "ok"


def test_record_decision_refuses_a_superseded_attempt(h: Harness) -> None:
    _accept(h)
    h.rt.partition.call(h.rt.records.begin_call("r1", 0, 0, "t"))
    assert not h.rt.partition.call(h.rt.records.record_decision_call("r1", 0, 1, 1, "{}", "d", "{}"))
    assert h.rt.partition.call(h.rt.records.record_decision_call("r1", 0, 0, 1, '{"x":1}', "d", "{}"))
    assert h.record("r1")["result"] == '{"x":1}'


def _decided(h: Harness, rid: str = "r1") -> None:
    _accept(h, rid)
    h.rt.partition.call(h.rt.records.begin_call(rid, 0, 0, "t"))
    h.rt.partition.call(h.rt.records.record_decision_call(rid, 0, 0, 0, '{"status":"scheduled"}', "d", "{}"))


def _booking(claims: str, key: str = "req:r1") -> Booking:
    row = json.dumps({"name": key, "worker_id": 1, "gpu_type": "cuda"})
    meta = json.dumps({"src": "gpusched", "rid": key[4:], "pin": False, "w": [1]})
    data = json.dumps({"instance_key": key, "row": json.loads(row), "meta": json.loads(meta)})
    return Booking(key, row, meta, claims, data)


def _reserve(h: Harness, booking: Booking, retry_due_ms: int = 0) -> Reserved:
    call = h.rt.cluster.reserve_call("r1", 0, 0, booking, retry_due_ms, "{}", result_digest="d")
    return h.rt.partition.call(call)


def _capacity(h: Harness, **gpus: int) -> None:
    h.rt.client.hset(h.rt.keys.capacity, mapping={k.replace("_", ":"): v for k, v in gpus.items()})


def test_reserve_books_every_gpu_or_none(h: Harness) -> None:
    _capacity(h, **{"1_cuda_0": 100, "1_cuda_1": 100})
    h.rt.client.hset(h.rt.keys.booked, "1:cuda:1", 60)
    _decided(h)
    conflict = _reserve(h, _booking("1:cuda:0=50;1:cuda:1=50"), 999)
    assert conflict.status == "conflict" and conflict.next_attempt == 1
    assert h.rt.client.hgetall(h.rt.keys.booked) == {"1:cuda:1": "60"}  # nothing booked
    detail = json.loads(conflict.detail or "{}")
    assert detail["gpus"] == [{"gpu": "1:cuda:1", "booked": 60, "claim": 50, "capacity": 100}]
    assert h.record("r1")["state"] == "retrying"
    assert h.rt.client.zscore(h.rt.keys.outbox, "r1|0|1") == 999
    assert _types(h)[-2:] == ["sched.reservation.conflicted", "sched.request.retried"]


def test_reserve_books_atomically_and_bumps_the_version_once(h: Harness) -> None:
    _capacity(h, **{"1_cuda_0": 100, "2_cuda_0": 100})
    _decided(h)
    booked = _reserve(h, _booking("1:cuda:0=40;2:cuda:0=100"), 0)
    assert booked.status == "booked" and booked.version == 1
    assert h.rt.client.hgetall(h.rt.keys.booked) == {"1:cuda:0": "40", "2:cuda:0": "100"}
    assert h.rt.client.hget(h.rt.keys.claims, "req:r1") == "1:cuda:0=40;2:cuda:0=100"
    meta = json.loads(h.rt.client.hget(h.rt.keys.instance_meta, "req:r1") or "{}")
    assert (meta["v"], meta["i"], meta["rid"]) == (1, 0, "r1")
    change = h.rt.client.xrange(h.rt.keys.changes)
    assert [(f["version"], f["type"]) for _, f in change] == [("1", "sched.reservation.booked")]
    again = _reserve(h, _booking("1:cuda:0=40"), 0)
    assert again.status == "duplicate" and again.detail == "req:r1"
    assert h.rt.client.hget(h.rt.keys.booked, "1:cuda:0") == "40"


def test_reserve_on_a_vanished_gpu_conflicts(h: Harness) -> None:
    _decided(h)
    outcome = _reserve(h, _booking("9:cuda:0=1"), 0)
    assert outcome.status == "conflict"
    assert json.loads(outcome.detail or "{}")["gpus"][0]["capacity"] is None


def test_reserve_gives_up_after_the_attempt_budget(h: Harness) -> None:
    h = Harness(settings=h.settings.model_copy(update={"conflict_max_attempts": 1}))
    _decided(h)
    outcome = _reserve(h, _booking("1:cuda:0=1"), 0)
    assert outcome.status == "exhausted"
    assert h.rt.client.zcard(h.rt.keys.outbox) == 0  # no retry queued


def test_publish_is_exactly_once(h: Harness) -> None:
    _capacity(h, **{"1_cuda_0": 100})
    _decided(h)
    # a scheduled result is published only once its booking is made
    assert _reserve(h, _booking("1:cuda:0=40"), 0).status == "booked"
    results = h.rt.results
    first = h.rt.partition.call(results.publish_call("r1", "scheduled", seq=0, attempt=0, result_digest="d"))
    second = h.rt.partition.call(results.publish_call("r1", "scheduled", seq=0, attempt=0, result_digest="d"))
    assert first[0] == "published" and second[0] == "duplicate"
    results = h.results()
    assert len(results) == 1 and results[0]["terminal"] == "1"
    assert results[0]["result"] == '{"status":"scheduled"}'
    assert h.record("r1")["state"] == "done"
    assert h.rt.client.ttl(h.rt.keys.request("r1")) == -1  # lives as long as its booking


def test_edge_rejection_never_overwrites_an_inflight_request(h: Harness) -> None:
    _accept(h)
    outcome = _reject(h, "r1", "{}")
    assert outcome[0] == "duplicate"
    fresh = _reject(h, "r2", '{"status":"rejected"}')
    assert fresh[0] == "published"
    assert h.record("r2")["state"] == "done"
    assert h.rt.client.ttl(h.rt.keys.request("r2")) > 0


def _reject(h: Harness, rid: str, result_json: str) -> tuple[str, str | None]:
    return h.rt.results.reject(
        rid, request_json="{}", request_digest="rd", result_json=result_json, result_digest="d", error=None
    )


def _park(h: Harness, rid: str, seq: int, epoch: int = 0, announce: bool = True) -> tuple[str, str | None]:
    return h.rt.partition.call(h.rt.parked.park_call(
        rid,
        seq,
        0,
        result_digest="d",
        parked_entry=json.dumps({"seq": seq, "reasons": ["insufficient_vram"]}),
        notice_json="",
        event_data="{}",
        epoch=epoch,
        requeue_due_ms=5,
        announce=announce,
    ))


def test_park_announces_unschedulable_once_per_request(h: Harness) -> None:
    _decided(h)
    outcome, notice = _park(h, "r1", 0)
    assert outcome == "parked" and notice
    assert _park(h, "r1", 0)[0] == "duplicate"
    woken = h.rt.parked.wake([("r1", 0)], {"by": "test"}, 7)
    assert woken == [("r1", 1)]
    h.rt.partition.call(h.rt.records.begin_call("r1", 1, 0, "t"))
    # parks once decided
    h.rt.partition.call(
        h.rt.records.record_decision_call("r1", 1, 0, 0, '{"status":"unschedulable"}', "d", "{}")
    )
    assert _park(h, "r1", 1) == ("parked", "")  # parked again, not announced again
    assert [r["status"] for r in h.results()] == ["unschedulable"]
    assert h.results()[0]["terminal"] == "0"


def test_park_without_announcement_for_contended_requests(h: Harness) -> None:
    _decided(h)
    assert _park(h, "r1", 0, announce=False) == ("parked", "")
    assert h.results() == []


def test_park_requeues_when_the_cluster_changed_during_the_decision(h: Harness) -> None:
    _decided(h)
    h.rt.client.set(h.rt.keys.epoch, 3)
    assert _park(h, "r1", 0, epoch=2) == ("requeued", "1")
    record = h.record("r1")
    assert (record["state"], record["seq"], record["attempt"]) == ("woken", "1", "0")
    assert h.rt.client.zscore(h.rt.keys.outbox, "r1|1|0") == 5
    assert h.rt.client.hlen(h.rt.keys.parked) == 0


def test_wake_only_moves_requests_still_parked_at_that_seq(h: Harness) -> None:
    for rid in ("a", "b"):
        _decided(h, rid)
        _park(h, rid, 0)
    assert h.rt.parked.wake([("a", 0), ("b", 5), ("zz", 0)], {"by": "x"}, 9) == [("a", 1)]
    assert set(h.rt.parked.entries()) == {"b"}
    assert h.rt.client.zscore(h.rt.keys.outbox, "a|1|0") == 9


def test_claim_due_leases_and_ack_removes_only_the_claimed_score(h: Harness) -> None:
    h.rt.client.zadd(h.rt.keys.outbox, {"a|0|0": 1, "b|0|0": h.rt.partition.now_ms() + 60_000})
    claimed = h.rt.delays.claim_due(h.rt.keys.outbox)
    assert [member for member, _ in claimed] == ["a|0|0"]
    member, lease = claimed[0]
    assert h.rt.delays.claim_due(h.rt.keys.outbox) == []  # leased, not due again yet
    h.rt.client.zadd(h.rt.keys.outbox, {member: lease + 1})  # re-scheduled meanwhile
    assert not h.rt.delays.ack_due(h.rt.keys.outbox, member, lease)
    assert h.rt.delays.ack_due(h.rt.keys.outbox, member, lease + 1)


def test_outbox_members_round_trip_ids_containing_separators() -> None:
    assert parse_outbox_member(outbox_member("a|b:c", 3, 4)) == ("a|b:c", 3, 4)


def test_dead_letter_rejects_an_unfinished_request_once(h: Harness) -> None:
    _accept(h)
    kwargs = dict(
        task_name="gpusched.decide",
        task_id="t",
        reason="worker_lost_repeatedly",
        detail="3 deliveries died",
        deliveries=4,
        args_json='["r1"]',
        rejected_json='{"status":"rejected"}',
    )
    dead_id, result_id = h.rt.deliveries.dead_letter(request_id="r1", **kwargs)  # type: ignore[arg-type]
    assert dead_id and result_id
    again = h.rt.deliveries.dead_letter(request_id="r1", **kwargs)  # type: ignore[arg-type]
    assert again[1] == ""
    entries = h.rt.client.xrange(h.rt.keys.deadletter)
    assert len(entries) == 2 and entries[0][1]["reason"] == "worker_lost_repeatedly"
    assert [r["status"] for r in h.results()] == ["rejected"]
    assert h.record("r1")["state"] == "done"


def test_dead_letter_without_a_request_only_records_the_message(h: Harness) -> None:
    _, result_id = h.rt.deliveries.dead_letter(
        request_id="",
        task_name="gpusched.cluster_event",
        task_id="t",
        reason="task_error",
        detail="boom",
        deliveries=3,
        args_json="[]",
        rejected_json="{}",
    )
    assert result_id == "" and h.results() == []
    assert h.events(["sched.request.dead_lettered"])[0].data["reason"] == "task_error"


def test_delivery_counter_counts_and_clears(h: Harness) -> None:
    assert [h.rt.deliveries.count_delivery("t") for _ in range(3)] == [1, 2, 3]
    assert h.rt.client.ttl(h.rt.keys.delivery("t")) > 0
    h.rt.deliveries.clear_delivery("t")
    assert h.rt.deliveries.count_delivery("t") == 1


def _step(rid: str = "r1", seq: int = 0, attempt: int = 0) -> str:
    return json.dumps(
        {
            "request_id": rid,
            "seq": seq,
            "attempt": attempt,
            "action": "reserve",
            "status": "scheduled",
            "version": 0,
            "epoch": 0,
            "result_digest": "d",
        }
    )


def test_the_first_decision_recorded_for_an_attempt_wins(h: Harness) -> None:
    _accept(h)
    h.rt.partition.call(h.rt.records.begin_call("r1", 0, 0, "t1"))
    h.rt.partition.call(h.rt.records.begin_call("r1", 0, 0, "t2"))  # a second decider of the same attempt
    records = h.rt.records
    assert h.rt.partition.call(records.record_decision_call("r1", 0, 0, 1, '{"x":1}', "d", "{}", _step()))
    second = h.rt.partition.call(records.record_decision_call("r1", 0, 0, 2, '{"x":2}', "d2", "{}", "{}"))
    assert not second and second.earlier is not None
    assert (second.earlier.state, second.earlier.step_json) == ("decided", _step())
    record = h.record("r1")
    assert (record["result"], record["result_digest"], record["decided_version"]) == ('{"x":1}', "d", "1")
    assert len(h.events(["sched.decision.made"])) == 1
    # a later delivery continues with the recorded step
    resumed = h.rt.partition.call(h.rt.records.begin_call("r1", 0, 0, "t3"))
    assert resumed.status == "resume" and resumed.recorded == second.earlier
    assert h.record("r1")["state"] == "decided"


def test_a_booked_attempt_resumes_and_a_parked_one_is_skipped(h: Harness) -> None:
    _capacity(h, **{"1_cuda_0": 100})
    _accept(h)
    h.rt.partition.call(h.rt.records.begin_call("r1", 0, 0, "t"))
    h.rt.partition.call(h.rt.records.record_decision_call("r1", 0, 0, 0, "{}", "d", "{}", _step()))
    assert _reserve(h, _booking("1:cuda:0=1")).status == "booked"
    begun = h.rt.partition.call(h.rt.records.begin_call("r1", 0, 0, "t2"))
    assert begun.status == "resume" and begun.recorded is not None and begun.recorded.state == "booked"
    _accept(h, "r2")
    h.rt.partition.call(h.rt.records.begin_call("r2", 0, 0, "t"))
    h.rt.partition.call(h.rt.records.record_decision_call("r2", 0, 0, 0, "{}", "d", "{}", _step("r2")))
    _park(h, "r2", 0)
    assert h.rt.partition.call(h.rt.records.begin_call("r2", 0, 0, "t2")).status == "skip"


def test_a_contended_park_arms_its_retry_timer_in_the_same_step(h: Harness) -> None:
    _decided(h)
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


def test_dead_lettering_a_booked_request_publishes_its_booking(h: Harness) -> None:
    _capacity(h, **{"1_cuda_0": 100})
    _decided(h)
    assert _reserve(h, _booking("1:cuda:0=40")).status == "booked"
    _, result_id = h.rt.deliveries.dead_letter(
        request_id="r1",
        task_name="gpusched.publish",
        task_id="t",
        reason="worker_lost_repeatedly",
        detail="x",
        deliveries=4,
        args_json="[]",
        rejected_json='{"status":"rejected"}',
        result_digest="d",
    )
    assert result_id
    assert [(r["status"], r["result"]) for r in h.results()] == [("scheduled", '{"status":"scheduled"}')]
    record = h.record("r1")
    assert (record["state"], record["status"], record["result_digest"]) == ("done", "scheduled", "d")
    assert h.rt.client.ttl(h.rt.keys.request("r1")) == -1  # lives as long as its booking
    assert h.rt.cluster.ledger()[1] == {"1:cuda:0": 40}
    assert h.events(["sched.result.published"])[0].data["result_digest"] == "d"


def test_dead_lettering_a_message_that_no_longer_drives_its_request_changes_nothing(h: Harness) -> None:
    _decided(h)
    base = dict(
        request_id="r1",
        task_name="gpusched.reserve",
        task_id="t",
        reason="task_error",
        detail="x",
        deliveries=3,
        args_json="[]",
        rejected_json='{"status":"rejected"}',
    )
    assert h.rt.deliveries.dead_letter(**base, seq=0, attempt=1)[1] == ""  # another attempt
    assert h.rt.deliveries.dead_letter(**base, result_digest="other")[1] == ""  # another decision
    assert h.rt.deliveries.dead_letter(**base, intake_task="t9")[1] == ""  # not the accepting message
    assert h.rt.deliveries.dead_letter(**{**base, "request_id": "unknown"})[1] == ""
    assert h.results() == [] and h.record("r1")["state"] == "decided"
    assert h.rt.client.exists(h.rt.keys.request("unknown")) == 0
    assert h.rt.client.xlen(h.rt.keys.deadletter) == 4
    _, result_id = h.rt.deliveries.dead_letter(**base, result_digest="d")
    assert result_id and h.results()[0]["status"] == "rejected"
    assert h.events(["sched.result.published"])[0].data["result_digest"]  # the rejection's digest


def test_the_redrive_step_backs_off_and_forgets_obsolete_entries(h: Harness) -> None:
    _accept(h, outbox_due_ms=1)
    now = h.rt.partition.now_ms()
    period = int(h.settings.stuck_after_s * 1000)
    assert h.rt.delays.redrive("r1", 0, 0, 1) == ("decide", "queued")
    assert h.rt.client.zscore(h.rt.keys.outbox, "r1|0|0") == now + 2 * period
    assert h.rt.delays.redrive("r1", 0, 0, 1) == ("decide", "queued")
    assert h.rt.client.zscore(h.rt.keys.outbox, "r1|0|0") == now + 4 * period
    for _ in range(10):
        h.rt.delays.redrive("r1", 0, 0, 1)
    assert h.rt.client.zscore(h.rt.keys.outbox, "r1|0|0") == now + 2**REDRIVE_DOUBLINGS * period
    assert h.rt.delays.redrive("r1", 0, 1, 1)[0] == "gone"  # not the current attempt: entry kept
    h.rt.client.zadd(h.rt.keys.outbox, {"r1|0|1": 7})
    assert h.rt.delays.redrive("r1", 0, 1, 7)[0] == "gone"
    assert h.rt.client.zscore(h.rt.keys.outbox, "r1|0|1") is None
    assert [e.data["redrives"] for e in h.events(["sched.request.redriven"])] == list(range(1, 13))
