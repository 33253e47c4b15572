"""``gpusched cluster event`` checks an event before it queues it (real redis-server, a real worker,
the installed ``gpusched``): an invalid one exits 2 naming the field and nothing reaches the queue;
a valid one is queued and the worker applies it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from service.support import Deployment, cluster, wait_until

pytestmark = pytest.mark.service

GPUSCHED = str(Path(sys.executable).with_name("gpusched"))


def test_cluster_events_are_validated_before_they_are_queued(
    deployment: Callable[..., Deployment], tmp_path: Path
) -> None:
    d = deployment()
    d.start_workers(1)
    d.client.apply_cluster(cluster(2, 2))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")}, **d.env}

    def event(document: Any) -> subprocess.CompletedProcess[str]:
        path = tmp_path / "event.json"
        path.write_text(json.dumps(document))
        return subprocess.run([GPUSCHED, "cluster", "event", str(path)], env=env, capture_output=True,
                              text=True, timeout=60, check=False, cwd=tmp_path)

    invalid = {
        "kind": {"kind": "nope"},
        "worker_id": {"kind": "worker_state", "worker_id": 99, "state": "ready"},
        "state": {"kind": "worker_state", "worker_id": 1, "state": "sleepy"},
        "labels.gpu": {"kind": "worker_labels", "worker_id": 1, "labels": {"gpu": 4090}},
        "gpus.0.index": {"kind": "gpu_memory_changed", "worker_id": 2, "gpus": [{"index": 5, "total": 1}]},
        "events.1.worker_id": [{"kind": "worker_state", "worker_id": 1, "state": "not_ready"},
                               {"kind": "worker_removed", "worker_id": 7}],
    }
    for field, document in invalid.items():
        done = event(document)
        assert done.returncode == 2 and f"rejected cluster event: {field}: " in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1 and done.stdout == ""
    assert d.redis.llen(d.keys.cluster_queue) == 0  # nothing was queued, not even the valid first event
    assert d.events("sched.cluster.event_rejected") == []

    queued = event({"kind": "worker_state", "worker_id": 1, "state": "not_ready"})
    assert queued.returncode == 0, queued.stderr
    assert json.loads(queued.stdout)["status"] == "queued"
    upserted = wait_until(lambda: d.events("sched.worker.upserted"), 60, "the worker to apply the event")
    assert upserted[0]["data"]["worker_id"] == 1 and upserted[0]["data"]["row"]["state"] == "not_ready"


def test_a_worker_refuses_identifiers_that_could_cross_a_ledger_entry(
    deployment: Callable[..., Deployment],
) -> None:
    """Sent by another Celery client (no client-side check): the worker's door refuses them."""
    from celery import Celery

    d = deployment()
    d.start_workers(1)
    d.client.apply_cluster(cluster(2, 1))
    capacity_before = d.client.rt.cluster.ledger()[0]
    crossing = cluster(1, 1)
    crossing["workers"][0]["status"]["gpu_devices"][0]["type"] = "x;2:cuda"  # once rewrote worker 2's GPU
    renamed = cluster(3, 1)["workers"][2]
    renamed["name"] = "node:3"
    foreign = Celery("control-plane", broker=d.url, set_as_current=False)
    try:
        for event in ({"kind": "snapshot", **crossing}, {"kind": "worker_added", "worker": renamed},
                      {"kind": "instance_deleted", "request_id": "r;1"}):
            foreign.send_task("gpusched.cluster_event", args=[event], queue=d.keys.cluster_queue)
    finally:
        foreign.close()
    refused = wait_until(lambda: len(found := d.events("sched.cluster.event_rejected")) >= 3 and found,
                         60, "three refusals")
    assert [e["data"]["field"] for e in refused] == [
        "workers.0.status.gpu_devices.0.type", "worker.name", "request_id"]
    assert d.client.rt.cluster.ledger()[0] == capacity_before and d.client.rt.cluster.version() == 1


def test_a_snapshot_event_that_removes_too_many_workers_is_refused_before_it_is_queued(
    deployment: Callable[..., Deployment], tmp_path: Path
) -> None:
    d = deployment()
    d.start_workers(1)
    d.client.apply_cluster(cluster(4, 1))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")}, **d.env}
    only_first = {"kind": "snapshot", **cluster(1, 1)}  # removes 3 of the 4: more than 0.5 of them

    path = tmp_path / "event.json"
    path.write_text(json.dumps(only_first))
    done = subprocess.run([GPUSCHED, "cluster", "event", str(path)], env=env, capture_output=True,
                          text=True, timeout=60, check=False, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert ("rejected cluster event: workers: the snapshot removes 3 of the 4 workers (more than "
            "max_removed_fraction 0.5)") in done.stderr, done.stderr
    assert d.redis.llen(d.keys.cluster_queue) == 0 and d.events("sched.cluster.event_rejected") == []
    assert sorted(d.client.rt.cluster.worker_ids()) == ["1", "2", "3", "4"]

    path.write_text(json.dumps({**only_first, "allow_removal": True}))  # confirmed: queued and applied
    confirmed = subprocess.run([GPUSCHED, "cluster", "event", str(path)], env=env, capture_output=True,
                               text=True, timeout=60, check=False, cwd=tmp_path)
    assert confirmed.returncode == 0 and json.loads(confirmed.stdout)["status"] == "queued", confirmed.stderr
    wait_until(lambda: d.client.rt.cluster.worker_ids() == ["1"], 60, "the worker to apply the snapshot")
