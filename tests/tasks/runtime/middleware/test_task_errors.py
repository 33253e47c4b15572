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
    h.submit({"request_id": "r", "model": model(env=SMALL)})
    item = h.queue.popleft()
    step = decide(h.rt, item.request_id, item.seq, item.attempt, "t")
    assert step is not None and h.record("r")["state"] == "booked"
    garbage = {"action": "reserve", "request_id": "r", "seq": 0, "attempt": 0, "unexpected": 1}
    for _ in range(h.settings.max_task_errors - 1):
        with pytest.raises(Reject):
            deliver(worker_tasks.resume, "msg-x", garbage)
    with pytest.raises(Ignore):
        deliver(worker_tasks.resume, "msg-x", garbage)
    (entry,) = h.rt.client.xrange(h.rt.keys.deadletter)
    assert (entry[1]["request_id"], entry[1]["reason"]) == ("", "task_error")
    assert h.results() == [] and h.record("r")["state"] == "booked"
    assert publish(h.rt, step) == "published"
