"""Publishing or parking: a change that lands during the decision requeues instead of parking."""

from __future__ import annotations

from builders import GIB
from service_builders import cluster_of, small_request, statuses, worker_row

from tasks.decision.decide import decide
from tasks.decision.publish import publish
from tasks.testing import Harness


def test_a_change_during_the_decision_requeues_instead_of_parking() -> None:
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a", labels={"gpu": "h100"})))
    h.submit(small_request("r", worker_selector={"gpu": "zz"}))
    item = h.queue.popleft()
    step = decide(h.rt, item.request_id, item.seq, item.attempt, "t")
    assert step is not None and step.action == "park"
    h.event({"kind": "worker_labels", "worker_id": 1, "labels": {"gpu": "zz"}})  # lands before parking
    assert publish(h.rt, step) == "requeued"
    h.pump()
    assert statuses(h) == [("r", "scheduled")]


def test_changes_that_cannot_unblock_do_not_requeue_a_decision() -> None:
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a"), worker_row(2, "b")))
    h.submit(small_request("big", env={"GPUSTACK_MODEL_VRAM_CLAIM": str(100 * GIB)}))
    epoch = h.rt.client.get(h.rt.keys.epoch)
    for state in ("unreachable", "not_ready"):  # a worker going (further) down unblocks nothing
        h.event({"kind": "worker_state", "worker_id": 2, "state": state})
    h.event({"kind": "worker_removed", "worker_id": 2})
    assert h.rt.client.get(h.rt.keys.epoch) == epoch
    item = h.queue.popleft()
    step = decide(h.rt, item.request_id, item.seq, item.attempt, "t")
    h.event({"kind": "worker_labels", "worker_id": 1, "labels": {"os": "linux"}})  # the same labels
    assert step is not None and publish(h.rt, step) == "parked"
    assert h.events(["sched.request.woken"]) == []
    h.event({"kind": "worker_labels", "worker_id": 1, "labels": {"zone": "z"}})  # can unblock
    assert h.rt.client.get(h.rt.keys.epoch) != epoch
