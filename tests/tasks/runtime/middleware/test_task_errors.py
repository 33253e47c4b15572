"""Task errors: retried, then dead-lettered without touching a request another message drives."""

from __future__ import annotations

import pytest
from builders import model
from celery.exceptions import Ignore, Reject
from service_builders import SMALL
from task_delivery import deliver

from tasks.decision.decide import decide
from tasks.decision.publish import publish
from tasks.runtime import worker_tasks
from tasks.testing import Harness


def test_a_malformed_step_naming_an_inflight_request_does_not_reject_it(h: Harness) -> None:
    """Dead-lettered at its first delivery (its arguments are the message's fault: no retry)."""
    h.submit({"request_id": "r", "model": model(env=SMALL)})
    item = h.queue.popleft()
    step = decide(h.rt, item.request_id, item.seq, item.attempt, "t")
    assert step is not None and h.record("r")["state"] == "booked"
    garbage = {"action": "reserve", "request_id": "r", "seq": 0, "attempt": 0, "unexpected": 1}
    with pytest.raises(Ignore):
        deliver(worker_tasks.resume, "msg-x", garbage)
    (entry,) = h.rt.client.xrange(h.rt.keys.deadletter)
    assert (entry[1]["request_id"], entry[1]["reason"]) == ("", "invalid_arguments")
    assert entry[1]["detail"] == "gpusched.resume: step is not a decision step: TypeError"
    assert h.results() == [] and h.record("r")["state"] == "booked"
    assert publish(h.rt, step) == "published"


def test_a_forged_decide_with_a_stray_keyword_is_dead_lettered_alone(h: Harness) -> None:
    """Issue 17, item 2: the right id, seq and attempt plus an unexpected keyword argument
    used to raise three times and then finish the victim as rejected/dead_lettered."""
    h.submit({"request_id": "victim", "model": model(env=SMALL)})
    item = h.queue.popleft()
    worker_tasks.decide.push_request(id="forged", called_directly=False, chain=None, callbacks=None)
    try:
        with pytest.raises(Ignore):
            worker_tasks.decide(item.request_id, item.seq, item.attempt, bogus=1)
    finally:
        worker_tasks.decide.pop_request()
    (entry,) = h.rt.client.xrange(h.rt.keys.deadletter)
    fields = entry[1]
    assert (fields["reason"], fields["detail"]) == (
        "invalid_arguments", "gpusched.decide: unexpected keyword argument 'bogus'")
    assert h.results() == [] and h.record("victim")["state"] == "queued"
    deliver(worker_tasks.decide, "real", item.request_id, item.seq, item.attempt)
    assert [r["status"] for r in h.results()] == ["scheduled"]


def test_a_decide_message_that_did_not_claim_the_attempt_finishes_nothing(h: Harness) -> None:
    """A well-formed message that keeps raising gives up on itself; it finishes the request only
    if it claimed the attempt (the record's decider): another message's request is left alone."""
    h.submit({"request_id": "victim", "model": model(env=SMALL)})
    item = h.queue.popleft()
    h.rt.client.hset(h.rt.keys.request("victim"), mapping={"state": "deciding", "decider": "real"})
    original = worker_tasks.decision.decide_and_finish
    worker_tasks.decision.decide_and_finish = lambda *_: (_ for _ in ()).throw(RuntimeError("boom"))
    try:
        for _ in range(h.settings.max_task_errors - 1):
            with pytest.raises(Reject):
                deliver(worker_tasks.decide, "stranger", item.request_id, item.seq, item.attempt)
        with pytest.raises(Ignore):
            deliver(worker_tasks.decide, "stranger", item.request_id, item.seq, item.attempt)
    finally:
        worker_tasks.decision.decide_and_finish = original
    (entry,) = h.rt.client.xrange(h.rt.keys.deadletter)
    assert (entry[1]["request_id"], entry[1]["reason"]) == ("victim", "task_error")
    assert h.results() == [] and h.record("victim")["state"] == "deciding"
