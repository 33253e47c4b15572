"""The Celery tasks: one message per decision; a leftover step is one resume message."""

from __future__ import annotations

from typing import Any

import pytest
from builders import model
from service_builders import SMALL
from task_delivery import deliver

from tasks.decision import decide as decide_stage
from tasks.decision.decide import Progress, decide
from tasks.runtime import worker_tasks
from tasks.testing import Harness


def test_the_decide_task_finishes_its_request_without_a_resume_message(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(h.rt, "resume", sent.append)
    for rid in ("first", "second"):
        h.submit({"request_id": rid, "model": model(env=SMALL)})
        h.queue.clear()
        assert deliver(worker_tasks.decide, f"msg-{rid}", rid, 0, 0) == "published"
        assert sent == []  # booked and published in its own message: nothing left to resume
        h.event({"kind": "instance_deleted", "request_id": rid})  # room for the next one
    assert [r["status"] for r in h.results() if r["terminal"] == "1"] == ["scheduled", "scheduled"]
    assert h.rt.client.exists(h.rt.keys.delivery("msg-first")) == 0


def test_a_leftover_step_goes_on_as_one_resume_message_that_finishes_it(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.submit({"request_id": "r", "model": model(env=SMALL)})
    item = h.queue.popleft()
    step = decide(h.rt, item.request_id, item.seq, item.attempt, "t")  # recorded and booked, not published
    assert step is not None and h.record("r")["state"] == "booked"
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(h.rt, "resume", sent.append)
    monkeypatch.setattr(decide_stage, "decide_and_finish", lambda *_: Progress(step))
    assert deliver(worker_tasks.decide, "msg-d", "r", 0, 0) == "resumed"
    assert sent == [step.to_dict()] and h.results() == []
    assert deliver(worker_tasks.resume, "msg-r", sent[0]) == "published"
    assert [(r["status"], r["terminal"]) for r in h.results()] == [("scheduled", "1")]
