"""The whole pipeline with a real redis-server and real Celery worker processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from celery import Celery
from service.support import Deployment, cluster, llm_request

pytestmark = pytest.mark.service

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "service"


def _example(name: str) -> dict[str, object]:
    return json.loads((EXAMPLES / "requests" / name).read_text())


def test_requests_results_events_wakeups_and_replay(deployment: Callable[..., Deployment]) -> None:
    d = deployment()
    d.start_workers(2)
    d.client.apply_cluster(json.loads((EXAMPLES / "cluster.json").read_text()))

    qwen = d.client.submit(_example("01-qwen7b-l40s.json"), wait=True, timeout=60)
    llama = d.client.submit(_example("02-llama70b-tp4.json"), wait=True, timeout=60)
    waits = d.client.submit(_example("03-qwen72b-tp4.json"), wait=True, timeout=60)
    bad = d.client.submit(_example("04-bad-parameters.json"), wait=True, timeout=60)
    assert [r["status"] for r in (qwen, llama, waits, bad)] == [  # type: ignore[index]
        "scheduled",
        "scheduled",
        "unschedulable",
        "rejected",
    ]
    assert bad["error"]["field"] == "model.backend_parameters"  # type: ignore[index]

    again = d.client.submit(_example("01-qwen7b-l40s.json"))
    assert again.to_dict() == {"request_id": "demo-qwen7b", "status": "duplicate", "state": "done"}  # type: ignore[union-attr]
    assert [e["request_id"] for e in d.events("sched.decision.made")].count("demo-qwen7b") == 1

    d.client.cluster_event({"kind": "instance_deleted", "request_id": "demo-llama70b"})
    placed = d.client.wait("demo-qwen72b", timeout=60, terminal=True)
    assert placed["status"] == "scheduled"
    assert placed["candidates"][placed["selected"]]["worker_name"] == "h100-a"

    outcomes = d.outcomes()
    assert outcomes["demo-qwen72b"] == {"notice": 1, "unschedulable": 1, "terminal": 1, "scheduled": 1}
    assert all(counts["terminal"] == 1 for counts in outcomes.values())
    d.assert_ledger_consistent()

    types = {e["type"] for e in d.events()}
    assert {
        "sched.request.received",
        "sched.decision.made",
        "sched.reservation.booked",
        "sched.result.published",
        "sched.request.parked",
        "sched.request.woken",
        "sched.instance.released",
        "sched.cluster.applied",
        "sched.request.rejected",
        "sched.request.duplicate",
    } <= types
    logged = [
        json.loads(line)
        for line in (d.logs / "worker-0.log").read_text().splitlines()
        + (d.logs / "worker-1.log").read_text().splitlines()
        if line.startswith("{")
    ]
    steps = {"gpusched.decide", "gpusched.resume"}
    traced = [
        line for line in logged if line.get("logger") == "celery.app.trace" and line.get("task_name") in steps
    ]
    assert traced and all(line.get("request_id", "").startswith("demo-") for line in traced)


def test_any_celery_client_can_submit_a_raw_request(deployment: Callable[..., Deployment]) -> None:
    d = deployment()
    d.start_workers(1)
    d.client.apply_cluster(cluster(2, 2))
    start = d.client._last_result_id()
    foreign = Celery("control-plane", broker=d.url, set_as_current=False)  # knows only the wire contract
    try:
        foreign.send_task("gpusched.decide", args=[llm_request("raw-1")], queue=d.keys.requests_queue)
        assert d.client.wait("raw-1", timeout=60, start_id=start)["status"] == "scheduled"
        bad = {"request_id": "raw-bad", "model": {"backend": "vLLM"}}
        foreign.send_task("gpusched.decide", args=[bad], queue=d.keys.requests_queue)
    finally:
        foreign.close()
    rejected = d.client.wait("raw-bad", timeout=60)
    assert rejected["status"] == "rejected" and rejected["error"]["field"] == "model.backend"


def test_command_line(deployment: Callable[..., Deployment], tmp_path: Path) -> None:
    d = deployment()
    d.start_workers(1)
    env = {**os.environ, **d.env}

    def gpusched(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tasks.edges.cli", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)

    applied = gpusched("cluster", "apply", str(EXAMPLES / "cluster.json"))
    assert applied.returncode == 0 and json.loads(applied.stdout)["status"] == "applied"
    placed = gpusched("submit", str(EXAMPLES / "requests" / "01-qwen7b-l40s.json"), "--wait")
    assert placed.returncode == 0 and json.loads(placed.stdout)["status"] == "scheduled"
    rejected = gpusched("submit", str(EXAMPLES / "requests" / "04-bad-parameters.json"), "--wait")
    assert rejected.returncode == 2
    assert "model.backend_parameters" in rejected.stderr and rejected.stderr.count("\n") == 1
    broken = tmp_path / "broken.json"
    broken.write_text('{"workers": [{"id": "x"}]}')
    invalid = gpusched("cluster", "apply", str(broken))
    assert invalid.returncode == 2 and "workers.0" in invalid.stderr
    replayed = gpusched("replay")
    assert replayed.returncode == 0 and replayed.stdout.startswith("2 replayed, 2 identical, 0 differ")
    env["GPUSCHED_REDIS_URL"] = "redis://127.0.0.1:1/0"
    down = gpusched("submit", str(EXAMPLES / "requests" / "01-qwen7b-l40s.json"))
    assert down.returncode == 1 and "cannot reach Redis" in down.stderr
