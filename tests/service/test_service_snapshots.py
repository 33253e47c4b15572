"""Bad snapshots with real processes: truncated or empty snapshots, mass removals, the dry run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from service.support import Deployment, cluster, llm_request, wait_until

pytestmark = [pytest.mark.service, pytest.mark.slow]

WORKERS, GPUS = 20, 2


def _cli(d: Deployment, tmp_path: Path, document: Any, *flags: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(document))
    env = {**os.environ, **d.env}
    return subprocess.run([sys.executable, "-m", "tasks.edges.cli", "cluster", "apply", str(path), *flags],
                          env=env, capture_output=True, text=True, timeout=120)


def _booked(d: Deployment) -> dict[str, tuple[int, ...]]:
    return {str(m.request_id): m.workers for m in d.client.rt.cluster.instance_meta().values()}


def test_truncated_snapshots_are_refused_and_a_mass_removal_is_held_back(
    deployment: Callable[..., Deployment], tmp_path: Path
) -> None:
    """Item 11: ``{}``, a bare worker, or 19 of 20 workers gone change nothing; a dry run only prints."""
    d = deployment(unreachable_grace_s=3, ready_stable_s=1)
    full = cluster(WORKERS, GPUS)
    d.client.apply_cluster(full)
    d.start_workers(2)
    ids = [f"s-{n:02d}" for n in range(WORKERS * GPUS)]  # one per GPU: every worker holds bookings
    for rid in ids:
        d.client.submit(llm_request(rid))
    wait_until(lambda: d.settled(set(ids)), 180, "every GPU to be booked")
    before, version = _booked(d), d.client.rt.cluster.version()
    assert sorted(before) == ids

    empty = _cli(d, tmp_path, {})
    assert empty.returncode == 2 and "workers: required key missing" in empty.stderr, empty.stderr
    bare = _cli(d, tmp_path, {"workers": full["workers"][:1]})
    assert bare.returncode == 2 and "model_instances: required key missing" in bare.stderr
    one = {"workers": full["workers"][:1], "model_instances": []}
    refused = _cli(d, tmp_path, one)
    assert refused.returncode == 2 and "removes 19 of the 20 workers" in refused.stderr
    assert "--allow-removal" in refused.stderr
    dry = _cli(d, tmp_path, one, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    diff = json.loads(dry.stdout)
    assert diff["workers"]["removed"] == list(range(2, WORKERS + 1)) and diff["applies"] is False
    assert len(diff["bookings"]["dropped"]) == (WORKERS - 1) * GPUS
    at_the_door = d.client.cluster_event({"kind": "snapshot", **one})  # the client refuses it unqueued
    assert at_the_door["status"] == "rejected" and at_the_door["field"] == "workers"
    assert "removes 19 of the 20 workers" in at_the_door["error"]
    foreign = Celery("control-plane", broker=d.url, set_as_current=False)
    try:  # anyone else on the broker: the worker gives the same refusal
        foreign.send_task("gpusched.cluster_event", args=[{"kind": "snapshot", **one}],
                          queue=d.keys.cluster_queue)
    finally:
        foreign.close()
    wait_until(lambda: d.events("sched.cluster.event_rejected"), 60, "the worker to reject the event")
    (worker_refusal,) = d.events("sched.cluster.event_rejected")
    refusal = worker_refusal["data"]
    assert (refusal["field"], refusal["error"]) == ("workers", at_the_door["error"])  # the same words
    assert (_booked(d), d.client.rt.cluster.version()) == (before, version)  # nothing changed

    # 8 workers vanish (below the removal limit) while 4 are unreachable: 12 of 20 out, above 0.5
    partial = json.loads(json.dumps(full))
    partial["workers"] = partial["workers"][:12]
    for row in partial["workers"][8:12]:
        row["state"] = "unreachable"
    summary = d.client.apply_cluster(partial)
    assert summary["rescheduled"] == []
    suspended = d.events("sched.reschedule.suspended")
    (held,) = [e for e in suspended if e["data"].get("reason") == "workers_vanished"]
    assert (held["data"]["vanished"], held["data"]["down"], held["data"]["bookings"]) == (8, 4, 8 * GPUS)

    d.client.apply_cluster(full)  # the control plane corrects itself within the grace period
    wait_until(lambda: _booked(d) == before, 60, "the held-back bookings to be booked again in place")
    assert not [rid for rid in d.outcomes() if "~" in rid]  # nothing was moved
    wait_until(lambda: d.idle(), 60, "the pipeline to settle")
    d.assert_ledger_consistent()


def test_an_instance_whose_id_came_as_a_float_is_freed_by_its_id(
    deployment: Callable[..., Deployment],
) -> None:
    """A control plane sends instance 7's id as ``7.0`` (JSON has one number type); deleting
    instance 7 frees its GPU and places the request waiting for it. The store keyed it
    ``id:7.0`` and every worker's mirror ``id:7``: the delete freed nothing and the request
    stayed parked."""
    d = deployment()
    snapshot = cluster(1, 1)
    holder = {"id": 7.0, "name": "held", "model_id": 3, "state": "running", "worker_id": 1,
              "worker_name": "node-0001", "gpu_type": "cuda", "gpu_indexes": [0],
              "computed_resource_claim": {"vram": {"0": 12 << 30}}}
    snapshot["model_instances"] = [holder]
    d.client.apply_cluster(snapshot)
    d.start_workers(1)
    d.client.submit(llm_request("waits"))
    wait_until(lambda: d.settled({"waits"}), 90, "the request to be decided")
    assert d.outcomes()["waits"]["unschedulable"] == 1  # the GPU is held: parked
    d.client.cluster_event({"kind": "instance_deleted", "instance_id": 7})
    wait_until(lambda: d.outcomes()["waits"]["scheduled"] == 1, 60, "the freed GPU to place the request")
    assert _booked(d) == {"waits": (1,)}
    wait_until(lambda: d.idle(), 60, "the pipeline to settle")
    d.assert_ledger_consistent()
