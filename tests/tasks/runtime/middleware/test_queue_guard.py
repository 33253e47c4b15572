"""Each queue runs only its own tasks; anything else is dead-lettered, never run."""

from __future__ import annotations

import pytest
from celery.exceptions import Ignore

from tasks.runtime.middleware.base import Delivery, run_task
from tasks.runtime.middleware.queue_guard import OnlyItsOwnQueue, accepted_tasks
from tasks.runtime.task_contract import CLUSTER_EVENT, DECIDE, DECIDE_BATCH, DRAIN_DELAYED, RESUME
from tasks.testing import Harness


def _deliver(h: Harness, task: str, queue: str | None) -> list[str]:
    ran: list[str] = []
    delivery = Delivery(task, "msg-1", ({"kind": "worker_removed", "worker_id": 1},), {}, h.rt, queue=queue)
    run_task((OnlyItsOwnQueue(),), delivery, lambda: ran.append(task))
    return ran


def test_a_cluster_event_pushed_onto_the_requests_queue_is_dead_lettered(h: Harness) -> None:
    with pytest.raises(Ignore):
        _deliver(h, CLUSTER_EVENT, h.rt.keys.requests_queue)
    ((_, fields),) = h.rt.client.xrange(h.rt.keys.deadletter)
    assert (fields["task"], fields["reason"]) == (CLUSTER_EVENT, "wrong_queue")
    assert fields["detail"] == f"{CLUSTER_EVENT} is not run from {h.rt.keys.requests_queue}"


def test_each_queue_runs_its_own_tasks_and_in_process_calls_pass(h: Harness) -> None:
    keys = h.rt.keys
    assert accepted_tasks(keys) == {
        keys.requests_queue: {DECIDE, DECIDE_BATCH}, keys.commits_queue: {RESUME},
        keys.cluster_queue: {CLUSTER_EVENT, DRAIN_DELAYED},
    }
    assert _deliver(h, DECIDE, keys.requests_queue) == [DECIDE]
    assert _deliver(h, CLUSTER_EVENT, keys.cluster_queue) == [CLUSTER_EVENT]
    assert _deliver(h, CLUSTER_EVENT, None) == [CLUSTER_EVENT]  # run in process: no queue
    assert _deliver(h, CLUSTER_EVENT, "someone.elses.queue") == [CLUSTER_EVENT]
    assert h.rt.client.xlen(keys.deadletter) == 0
