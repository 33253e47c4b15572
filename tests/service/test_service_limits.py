"""Size limits for a request, a snapshot and a cluster event (real redis-server, real workers;
both doors: the client and the CLI in the caller's process, raw Celery messages in the worker's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from celery import Celery
from service.support import Deployment, cluster, llm_request, wait_until

pytestmark = pytest.mark.service

GPUSCHED = str(Path(sys.executable).with_name("gpusched"))
#: Small limits (settings): a 40-worker snapshot (~16 kB) and a 20 kB request are over them.
LIMITS = {"max_request_bytes": 8192, "max_event_bytes": 8192, "max_snapshot_bytes": 8192}


def test_documents_over_their_limit_are_refused_naming_it_and_never_stored(
    deployment: Callable[..., Deployment], tmp_path: Path
) -> None:
    d = deployment(**LIMITS)
    d.start_workers(1)
    d.client.apply_cluster(cluster(2, 2))
    big = {**llm_request("big-1"), "notes": "x" * 20_000}
    big_snapshot = cluster(40, 1)
    big_event = {"kind": "worker_labels", "worker_id": 1, "labels": {"k": "v" * 20_000}}
    foreign = Celery("control-plane", broker=d.url, set_as_current=False)
    try:
        foreign.send_task("gpusched.decide", args=[big], queue=d.keys.requests_queue)
        foreign.send_task("gpusched.cluster_event", args=[{"kind": "snapshot", **big_snapshot}],
                          queue=d.keys.cluster_queue)
        foreign.send_task("gpusched.cluster_event", args=[big_event], queue=d.keys.cluster_queue)
    finally:
        foreign.close()

    rejected = d.client.wait("big-1", timeout=60)
    assert rejected["status"] == "rejected" and rejected["error"]["field"] == "request"
    assert "above the max_request_bytes limit of 8192 bytes" in rejected["error"]["message"]
    stored = d.redis.hget(d.keys.request("big-1"), "request")
    assert stored is not None and len(stored) < 500  # a stub, not the 20 kB request
    received = [e for e in d.events("sched.request.received") if e["request_id"] == "big-1"]
    assert len(received) == 1 and len(json.dumps(received[0]["data"])) < 1000
    refused = wait_until(lambda: len(found := d.events("sched.cluster.event_rejected")) >= 2 and found,
                         60, "the two oversized cluster events refused")
    assert sorted(e["data"]["field"] for e in refused) == ["event", "snapshot"]
    assert d.client.rt.cluster.version() == 1  # nothing applied

    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")}, **d.env}
    big_cli = {**big, "request_id": "big-2"}
    for name, document in (("request", big_cli), ("snapshot", big_snapshot), ("event", big_event)):
        (tmp_path / f"{name}.json").write_text(json.dumps(document))
    runs = {
        "request": ["submit", str(tmp_path / "request.json")],
        "snapshot": ["cluster", "apply", str(tmp_path / "snapshot.json")],
        "event": ["cluster", "event", str(tmp_path / "event.json")],
    }
    for name, args in runs.items():
        done = subprocess.run([GPUSCHED, *args], env=env, capture_output=True, text=True, timeout=60,
                              check=False, cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert f"max_{name}_bytes limit of 8192 bytes" in done.stderr and done.stderr.count("\n") == 1
    assert d.client.rt.cluster.version() == 1
