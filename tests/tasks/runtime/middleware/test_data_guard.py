"""Nothing runs against a Redis that lost the service's data; messages wait, cluster events are dropped."""

from __future__ import annotations

import pytest
from builders import model
from celery.exceptions import Ignore, Reject
from service_builders import SMALL
from task_delivery import deliver

from tasks.runtime import worker_tasks
from tasks.runtime.middleware.data_guard import RefuseWithoutData
from tasks.state.generation import DataLost
from tasks.testing import Harness


def test_a_wiped_redis_requeues_every_message_and_decides_nothing(h: Harness) -> None:
    h.rt.client.flushall()
    h.submit({"request_id": "r", "model": model(env=SMALL)})  # recorded in the wiped Redis
    for _ in range(h.settings.max_task_errors + h.settings.max_crashes):
        with pytest.raises(Reject) as requeued:
            deliver(worker_tasks.decide, "msg-1", "r", 0, 0)
        assert requeued.value.requeue and isinstance(requeued.value.reason, DataLost)
    assert h.record("r")["state"] == "queued"  # not begun
    assert h.rt.client.exists(h.rt.keys.delivery("msg-1")) == 0  # never counted
    assert h.results() == [] and h.rt.client.xlen(h.rt.keys.deadletter) == 0
    assert [e.data["verdict"] for e in h.events(["sched.data.lost"])] == ["wiped"]


def test_a_cluster_event_sent_while_the_data_is_lost_is_dead_lettered(h: Harness) -> None:
    h.rt.client.flushall()
    h.rt.generation.check()
    with pytest.raises(Ignore):
        deliver(worker_tasks.cluster_event, "msg-c", {"kind": "worker_removed", "worker_id": 1})
    ((_, fields),) = h.rt.client.xrange(h.rt.keys.deadletter)
    assert (fields["task"], fields["reason"]) == ("gpusched.cluster_event", "data_lost")


def test_the_boot_check_writes_the_first_generation(h: Harness) -> None:
    h.rt.client.flushall()
    h.rt.generation.memory = type(h.rt.generation.memory)()  # a new deployment, a new process
    RefuseWithoutData().after_worker_boot("n@h", lambda: h.rt)
    assert h.rt.client.get(h.rt.keys.generation) is not None
    assert h.rt.generation.check().verdict == "ok"
