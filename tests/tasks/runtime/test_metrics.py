"""Domain metrics: counted where they happen, and the partition's state read at scrape time."""

from __future__ import annotations

from typing import Any

from builders import GIB
from prometheus_client import REGISTRY
from service_builders import cluster_of, small_request, worker_row

from tasks.flows import metrics
from tasks.runtime.worker_tasks import decide as decide_task
from tasks.testing import Harness

TWENTY_GIB = {"GPUSTACK_MODEL_VRAM_CLAIM": str(20 * GIB)}


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _state(h: Harness) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in metrics.state_families(h.rt)
        for sample in family.samples
    }


def test_decisions_wakeups_and_dead_letters_are_counted_where_they_happen() -> None:
    before = {
        "scheduled": _value("gpusched_decisions_total", status="scheduled"),
        "unschedulable": _value("gpusched_decisions_total", status="unschedulable"),
        "wakeups": _value("gpusched_wakeups_total"),
        "dead": _value("gpusched_dead_letters_total", reason="task_error"),
    }
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a")))
    h.submit(small_request("first", env=TWENTY_GIB))
    h.submit(small_request("waits", env=TWENTY_GIB))
    h.pump()
    h.event({"kind": "instance_deleted", "request_id": "first"})
    h.pump()
    assert _value("gpusched_decisions_total", status="scheduled") - before["scheduled"] == 2
    assert _value("gpusched_decisions_total", status="unschedulable") - before["unschedulable"] == 1
    assert _value("gpusched_wakeups_total") - before["wakeups"] == 1
    metrics.count_dead_letter("task_error")
    assert _value("gpusched_dead_letters_total", reason="task_error") - before["dead"] == 1


def test_the_decide_task_observes_its_duration_and_the_submit_to_result_latency(h: Any) -> None:
    # (the runtime fixture ``h`` of tests/tasks/runtime: one 4090 worker, tasks bound to it)
    counts = (_value("gpusched_decision_seconds_count"), _value("gpusched_submit_to_result_seconds_count"))
    latency = _value("gpusched_submit_to_result_seconds_sum")
    h.submit(small_request("r"))
    h.queue.clear()
    h.clock.advance(2.5)  # the message waited 2.5 s in the queue
    decide_task.apply(args=("r", 0, 0), task_id="msg-r")
    assert _value("gpusched_decision_seconds_count") - counts[0] == 1
    assert _value("gpusched_submit_to_result_seconds_count") - counts[1] == 1
    assert _value("gpusched_submit_to_result_seconds_sum") - latency == 2.5


def test_state_gauges_read_parked_reasons_version_nodes_and_overbooking() -> None:
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a"), worker_row(2, "b", state="not_ready")))
    h.submit(small_request("first", env=TWENTY_GIB))
    h.submit(small_request("big", env=TWENTY_GIB))
    h.submit(small_request("label", worker_selector={"gpu": "nowhere"}))
    h.pump()
    h.event({"kind": "gpu_memory_changed", "worker_id": 1, "gpus": [{"index": 0, "total": 10 * GIB}]})
    state = _state(h)
    held = sum(h.rt.cluster.claims()["req:first"].values())
    assert state[("gpusched_parked_requests", (("reason", "insufficient_vram"),))] == 1
    assert state[("gpusched_parked_requests", (("reason", "label_mismatch"),))] == 1
    assert state[("gpusched_parked_requests_total", ())] == 2
    assert state[("gpusched_cluster_version", ())] == h.rt.cluster.version()
    assert state[("gpusched_cluster_workers", (("state", "ready"),))] == 1
    assert state[("gpusched_cluster_workers", (("state", "not_ready"),))] == 1
    assert state[("gpusched_ledger_overbooked_gpus", ())] == 1
    assert state[("gpusched_ledger_overbooked_bytes", ())] == held - 10 * GIB  # shrank below the booking
    assert state[("gpusched_deadletter_entries", ())] == 0


def test_scrape_state_reports_queue_depth_in_flight_free_capacity_and_the_outage_guard() -> None:
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a", 2), worker_row(2, "down", 1, state="not_ready")))
    h.submit(small_request("placed"))
    h.pump()
    h.submit(small_request("queued"))  # recorded and queued, not decided yet
    h.rt.client.lpush(h.rt.keys.requests_queue, "m1", "m2")  # two messages waiting on the queue
    state = _state(h)
    assert state[("gpusched_queue_messages", (("queue", h.rt.keys.requests_queue),))] == 2
    assert state[("gpusched_queue_messages", (("queue", h.rt.keys.cluster_queue),))] == 0
    assert state[("gpusched_requests_in_flight", ())] == 1  # "queued": its outbox watchdog
    capacity, booked = h.rt.cluster.ledger()
    ready = {key: value for key, value in capacity.items() if key.startswith("1:")}
    kind = (("gpu_name", "GPU"), ("gpu_type", "cuda"))
    free = sum(ready.values()) - sum(booked.values())  # the not-ready worker's GPU is not free capacity
    assert state[("gpusched_free_bytes", kind)] == free
    assert state[("gpusched_largest_free_bytes", kind)] == max(ready.values())  # one GPU left untouched
    assert state[("gpusched_gpus", kind)] == 2
    assert state[("gpusched_reschedule_suspended", ())] == 0
    h.rt.client.set(h.rt.keys.reschedule_suspended, "{}")
    assert _state(h)[("gpusched_reschedule_suspended", ())] == 1
