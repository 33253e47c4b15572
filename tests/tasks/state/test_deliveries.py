"""The redelivery guard's state: delivery counts and the dead-letter step."""

from __future__ import annotations

from record_steps import accept, booking, decided, reserve_booking, set_capacity

from tasks.testing import Harness


def test_dead_letter_rejects_an_unfinished_request_once(h: Harness) -> None:
    accept(h)
    h.rt.partition.call(h.rt.records.begin_call("r1", 0, 0, "t"))  # message t claimed the attempt
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
    assert [h.rt.deliveries.count_delivery("t", start) for start in ("a", "b", "c")] == [1, 2, 3]
    assert h.rt.client.ttl(h.rt.keys.delivery("t")) > 0
    h.rt.deliveries.clear_delivery("t")
    assert h.rt.deliveries.count_delivery("t", "d") == 1


def test_a_start_counted_twice_is_one_start(h: Harness) -> None:
    """Issue 17, item 3: redis-py retries a transaction whose reply a connection reset lost; the
    same start must not count twice (an INCR did: one reset per delivery looked like two deaths)."""
    assert [h.rt.deliveries.count_delivery("t", "same") for _ in range(3)] == [1, 1, 1]
    assert h.rt.deliveries.count_delivery("t", "next") == 2


def test_dead_lettering_a_booked_request_publishes_its_booking(h: Harness) -> None:
    set_capacity(h, **{"1_cuda_0": 100})
    decided(h)
    assert reserve_booking(h, booking({"1:cuda:0": 40})).status == "booked"
    _, result_id = h.rt.deliveries.dead_letter(
        request_id="r1",
        task_name="gpusched.resume",
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
    decided(h)
    base = dict(
        request_id="r1",
        task_name="gpusched.resume",
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


def test_only_the_decide_message_that_claimed_the_attempt_finishes_it(h: Harness) -> None:
    """Issue 17, item 2: a decide message naming a request (right seq and attempt) finishes it
    only if it is the record's decider; a message that failed validation never does."""
    accept(h)
    h.rt.partition.call(h.rt.records.begin_call("r1", 0, 0, "real"))
    base = dict(request_id="r1", task_name="gpusched.decide", reason="task_error", detail="x",
                deliveries=3, args_json='["r1", 0, 0]', rejected_json='{"status":"rejected"}')
    assert h.rt.deliveries.dead_letter(**base, task_id="forged")[1] == ""  # type: ignore[arg-type]
    assert h.rt.deliveries.dead_letter(**base, task_id="real", finish=False)[1] == ""  # type: ignore[arg-type]
    assert h.results() == [] and h.record("r1")["state"] == "deciding"
    letters = h.rt.client.xrange(h.rt.keys.deadletter)
    assert [fields["task_id"] for _, fields in letters] == ["forged", "real"]
    assert h.rt.deliveries.dead_letter(**base, task_id="real")[1]  # type: ignore[arg-type]
    assert [r["status"] for r in h.results()] == ["rejected"]
