"""Request-lifecycle Lua scripts on fakeredis: each guard and each exactly-once rule."""

from __future__ import annotations

import json

import pytest

from tasks.store import Booking, outbox_member, parse_outbox_member
from tasks.testing import Harness


@pytest.fixture
def h() -> Harness:
    return Harness()


def _accept(h: Harness, rid: str = "r1", **kwargs: object) -> object:
    return h.rt.store.accept(rid, json.dumps({"request_id": rid}), "digest", **kwargs)  # type: ignore[arg-type]


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
    assert h.rt.store.begin("missing", 0, 0, "t").status == "missing"
    assert h.rt.store.begin("r1", 0, 1, "t").status == "stale"
    begun = h.rt.store.begin("r1", 0, 0, "t")
    assert begun.status == "ok" and json.loads(begun.request_json or "{}") == {"request_id": "r1"}
    assert h.record("r1")["state"] == "deciding"
    assert h.rt.store.begin("r1", 0, 0, "t2").status == "ok"  # a redelivered decision may redo it


def test_record_decision_refuses_a_superseded_attempt(h: Harness) -> None:
    _accept(h)
    h.rt.store.begin("r1", 0, 0, "t")
    assert not h.rt.store.record_decision("r1", 0, 1, 1, "{}", "d", "{}")
    assert h.rt.store.record_decision("r1", 0, 0, 1, '{"x":1}', "d", "{}")
    assert h.record("r1")["result"] == '{"x":1}'


def _decided(h: Harness, rid: str = "r1") -> None:
    _accept(h, rid)
    h.rt.store.begin(rid, 0, 0, "t")
    h.rt.store.record_decision(rid, 0, 0, 0, '{"status":"scheduled"}', "d", "{}")


def _booking(claims: str, key: str = "req:r1") -> Booking:
    row = json.dumps({"name": key, "worker_id": 1, "gpu_type": "cuda"})
    meta = json.dumps({"src": "gpusched", "rid": key[4:], "pin": False, "w": [1]})
    data = json.dumps({"instance_key": key, "row": json.loads(row), "meta": json.loads(meta)})
    return Booking(key, row, meta, claims, data)


def _capacity(h: Harness, **gpus: int) -> None:
    h.rt.client.hset(h.rt.keys.capacity, mapping={k.replace("_", ":"): v for k, v in gpus.items()})


def test_reserve_books_every_gpu_or_none(h: Harness) -> None:
    _capacity(h, **{"1_cuda_0": 100, "1_cuda_1": 100})
    h.rt.client.hset(h.rt.keys.booked, "1:cuda:1", 60)
    _decided(h)
    conflict = h.rt.store.reserve("r1", 0, 0, _booking("1:cuda:0=50;1:cuda:1=50"), 999, "{}")
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
    booked = h.rt.store.reserve("r1", 0, 0, _booking("1:cuda:0=40;2:cuda:0=100"), 0, "{}")
    assert booked.status == "booked" and booked.version == 1
    assert h.rt.client.hgetall(h.rt.keys.booked) == {"1:cuda:0": "40", "2:cuda:0": "100"}
    assert h.rt.client.hget(h.rt.keys.claims, "req:r1") == "1:cuda:0=40;2:cuda:0=100"
    meta = json.loads(h.rt.client.hget(h.rt.keys.instance_meta, "req:r1") or "{}")
    assert (meta["v"], meta["i"], meta["rid"]) == (1, 0, "r1")
    change = h.rt.client.xrange(h.rt.keys.changes)
    assert [(f["version"], f["type"]) for _, f in change] == [("1", "sched.reservation.booked")]
    again = h.rt.store.reserve("r1", 0, 0, _booking("1:cuda:0=40"), 0, "{}")
    assert again.status == "duplicate" and again.detail == "req:r1"
    assert h.rt.client.hget(h.rt.keys.booked, "1:cuda:0") == "40"


def test_reserve_on_a_vanished_gpu_conflicts(h: Harness) -> None:
    _decided(h)
    outcome = h.rt.store.reserve("r1", 0, 0, _booking("9:cuda:0=1"), 0, "{}")
    assert outcome.status == "conflict"
    assert json.loads(outcome.detail or "{}")["gpus"][0]["capacity"] is None


def test_reserve_gives_up_after_the_attempt_budget(h: Harness) -> None:
    h = Harness(settings=h.settings.model_copy(update={"conflict_max_attempts": 1}))
    _decided(h)
    outcome = h.rt.store.reserve("r1", 0, 0, _booking("1:cuda:0=1"), 0, "{}")
    assert outcome.status == "exhausted"
    assert h.rt.client.zcard(h.rt.keys.outbox) == 0  # no retry queued


def test_publish_is_exactly_once(h: Harness) -> None:
    _decided(h)
    first = h.rt.store.publish("r1", "scheduled", seq=0)
    second = h.rt.store.publish("r1", "scheduled", seq=0)
    assert first[0] == "published" and second[0] == "duplicate"
    results = h.results()
    assert len(results) == 1 and results[0]["terminal"] == "1"
    assert results[0]["result"] == '{"status":"scheduled"}'
    assert h.record("r1")["state"] == "done"
    assert h.rt.client.ttl(h.rt.keys.request("r1")) == -1  # lives as long as its booking


def test_edge_rejection_never_overwrites_an_inflight_request(h: Harness) -> None:
    _accept(h)
    outcome = h.rt.store.publish("r1", "rejected", result_json="{}", request_json="{}")
    assert outcome[0] == "duplicate"
    fresh = h.rt.store.publish("r2", "rejected", result_json='{"status":"rejected"}', request_json="{}")
    assert fresh[0] == "published"
    assert h.record("r2")["state"] == "done"
    assert h.rt.client.ttl(h.rt.keys.request("r2")) > 0


def _park(h: Harness, rid: str, seq: int, epoch: int = 0, announce: bool = True) -> tuple[str, str | None]:
    return h.rt.store.park(
        rid, seq, 0, parked_entry=json.dumps({"seq": seq, "reasons": ["insufficient_vram"]}),
        notice_json="", event_data="{}", epoch=epoch, requeue_due_ms=5, announce=announce,
    )


def test_park_announces_unschedulable_once_per_request(h: Harness) -> None:
    _decided(h)
    outcome, notice = _park(h, "r1", 0)
    assert outcome == "parked" and notice
    assert _park(h, "r1", 0)[0] == "duplicate"
    woken = h.rt.store.wake([("r1", 0)], {"by": "test"}, 7)
    assert woken == [("r1", 1)]
    h.rt.store.begin("r1", 1, 0, "t")
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
    assert h.rt.store.wake([("a", 0), ("b", 5), ("zz", 0)], {"by": "x"}, 9) == [("a", 1)]
    assert set(h.rt.store.parked()) == {"b"}
    assert h.rt.client.zscore(h.rt.keys.outbox, "a|1|0") == 9


def test_claim_due_leases_and_ack_removes_only_the_claimed_score(h: Harness) -> None:
    h.rt.client.zadd(h.rt.keys.outbox, {"a|0|0": 1, "b|0|0": h.rt.store.now_ms() + 60_000})
    claimed = h.rt.store.claim_due(h.rt.keys.outbox)
    assert [member for member, _ in claimed] == ["a|0|0"]
    member, lease = claimed[0]
    assert h.rt.store.claim_due(h.rt.keys.outbox) == []  # leased, not due again yet
    h.rt.client.zadd(h.rt.keys.outbox, {member: lease + 1})  # re-scheduled meanwhile
    assert not h.rt.store.ack_due(h.rt.keys.outbox, member, lease)
    assert h.rt.store.ack_due(h.rt.keys.outbox, member, lease + 1)


def test_outbox_members_round_trip_ids_containing_separators() -> None:
    assert parse_outbox_member(outbox_member("a|b:c", 3, 4)) == ("a|b:c", 3, 4)


def test_dead_letter_rejects_an_unfinished_request_once(h: Harness) -> None:
    _accept(h)
    kwargs = dict(task_name="gpusched.decide", task_id="t", reason="worker_lost_repeatedly",
                  detail="3 deliveries died", deliveries=4, args_json='["r1"]',
                  rejected_json='{"status":"rejected"}')
    dead_id, result_id = h.rt.store.dead_letter(request_id="r1", **kwargs)  # type: ignore[arg-type]
    assert dead_id and result_id
    again = h.rt.store.dead_letter(request_id="r1", **kwargs)  # type: ignore[arg-type]
    assert again[1] == ""
    entries = h.rt.client.xrange(h.rt.keys.deadletter)
    assert len(entries) == 2 and entries[0][1]["reason"] == "worker_lost_repeatedly"
    assert [r["status"] for r in h.results()] == ["rejected"]
    assert h.record("r1")["state"] == "done"


def test_dead_letter_without_a_request_only_records_the_message(h: Harness) -> None:
    _, result_id = h.rt.store.dead_letter(
        request_id="", task_name="gpusched.cluster_event", task_id="t", reason="task_error",
        detail="boom", deliveries=3, args_json="[]", rejected_json="{}",
    )
    assert result_id == "" and h.results() == []
    assert h.events(["sched.request.dead_lettered"])[0].data["reason"] == "task_error"


def test_delivery_counter_counts_and_clears(h: Harness) -> None:
    assert [h.rt.store.count_delivery("t") for _ in range(3)] == [1, 2, 3]
    assert h.rt.client.ttl(h.rt.keys.delivery("t")) > 0
    h.rt.store.clear_delivery("t")
    assert h.rt.store.count_delivery("t") == 1
