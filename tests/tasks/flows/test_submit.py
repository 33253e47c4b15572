"""Taking a request in: rejected at once, recorded once, queued, driven even if its message is lost."""

from __future__ import annotations

from collections import deque
from typing import Any

from kombu.exceptions import OperationalError
from service_builders import small_request, uniform_cluster

from tasks.decision.decide import decide
from tasks.intake.requests import normalize
from tasks.testing import Harness


def test_invalid_requests_are_rejected_at_the_edge_naming_the_field() -> None:
    h = Harness()
    bad = h.submit({"request_id": "bad", "model": {"name": "m", "replicas": -1}})
    assert bad.status == "rejected" and bad.result is not None
    assert bad.result["error"]["field"] == "model.replicas"
    assert h.queue == deque_empty()
    assert [(r["request_id"], r["status"], r["terminal"]) for r in h.results()] == [("bad", "rejected", "1")]
    assert h.events(["sched.request.rejected"])[0].data["error"]["field"] == "model.replicas"
    assert h.submit({"request_id": "bad", "model": {"name": "m", "replicas": -1}}).status == "duplicate"


def deque_empty() -> Any:

    return deque()


def test_the_same_request_id_yields_one_decision() -> None:
    h = Harness()
    h.apply(uniform_cluster())
    assert h.submit(small_request("r")).status == "accepted"
    assert h.submit(small_request("r")).status == "duplicate"
    assert len(h.queue) == 1
    h.pump()
    assert len(h.events(["sched.decision.made"])) == 1 and len(h.results()) == 1


def test_the_same_request_id_with_another_body_is_a_conflict_naming_both_digests() -> None:
    h = Harness()
    h.apply(uniform_cluster())
    first = small_request("r")
    assert h.submit(first).status == "accepted"
    other = small_request("r", name="another-model")
    conflict = h.submit(other)
    stored, submitted = normalize(first).digest, normalize(other).digest
    assert stored != submitted
    assert conflict.to_dict() == {
        "request_id": "r", "status": "conflict", "state": "queued",
        "digest": submitted, "stored_digest": stored,
    }
    assert [e.data for e in h.events(["sched.request.conflict"])] == [
        {"state": "queued", "digest": submitted, "stored_digest": stored}
    ]
    assert h.submit(first).status == "duplicate"  # the same body again is still a duplicate
    h.pump()
    assert len(h.events(["sched.decision.made"])) == 1
    assert h.record("r")["request"] == normalize(first).request_json  # the first request was decided


def test_an_invalid_body_under_a_known_id_is_a_conflict_not_a_rejection() -> None:
    h = Harness()
    h.apply(uniform_cluster())
    assert h.submit(small_request("r")).status == "accepted"
    answer = h.submit({"request_id": "r", "model": {"name": "m", "replicas": -1}})
    assert answer.status == "conflict" and answer.stored_digest == normalize(small_request("r")).digest
    assert h.results() == []  # no rejection was published for the known request


def test_a_raw_request_conflicting_with_a_known_id_is_not_decided() -> None:
    h = Harness()
    h.apply(uniform_cluster())
    assert h.submit(small_request("r")).status == "accepted"
    assert decide(h.rt, small_request("r", name="other"), 0, 0, "task-9") is None
    assert len(h.events(["sched.request.conflict"])) == 1 and h.events(["sched.decision.made"]) == []


def test_a_raw_request_on_the_queue_is_accepted_and_decided() -> None:
    h = Harness()
    h.apply(uniform_cluster())
    step = decide(h.rt, small_request("raw"), 0, 0, "task-1")
    assert step is not None and step.action == "publish"  # booked inside the decide lease
    assert decide(h.rt, small_request("raw"), 0, 0, "task-2") is None  # another message, same id
    assert h.events(["sched.request.duplicate"])
    rejected = decide(h.rt, {"request_id": "x", "model": {"backend": "vLLM"}}, 0, 0, "t")
    assert rejected is None and h.results()[-1]["status"] == "rejected"


def test_an_accepted_request_whose_message_cannot_be_sent_is_still_driven() -> None:
    h = Harness()
    h.apply(uniform_cluster())
    sent = h.rt.dispatch

    def broker_down(*args: Any) -> None:
        raise OperationalError("broker unreachable")

    h.rt.dispatch = broker_down
    assert h.submit(small_request("r")).status == "accepted"  # recorded: not an error for the caller
    h.rt.dispatch = sent
    assert not h.queue
    h.clock.advance(h.settings.outbox_lease_s + 1)
    assert h.drain()["enqueued"] == 1
    h.pump()
    assert [r["status"] for r in h.results()] == ["scheduled"]


def test_edge_rejections_log_the_received_request() -> None:
    h = Harness()
    h.submit({"request_id": "bad", "model": {"name": "m", "replicas": -1}})
    assert [e.type for e in h.events()] == [
        "sched.request.received",
        "sched.request.rejected",
        "sched.result.published",
    ]
    received = h.events(["sched.request.received"])[0]
    assert received.request_id == "bad" and received.data["request"]["model"]["replicas"] == -1
