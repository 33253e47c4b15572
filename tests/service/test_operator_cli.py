"""The operator commands against a live deployment: describe, cluster show, conflicts at the door."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from service.support import Deployment, cluster, llm_request, wait_until

from tasks.edges.client import Submission

pytestmark = pytest.mark.service

ROOT = Path(__file__).resolve().parents[2]


def _cli(d: Deployment, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **d.env, "COLUMNS": "100"}
    command = [sys.executable, "-m", "tasks.edges.cli", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_describe_and_cluster_show_explain_a_live_deployment(deployment: Callable[..., Deployment]) -> None:
    d = deployment()
    d.start_workers(1)
    d.client.apply_cluster(cluster(2, 2))
    d.client.cluster_event({"kind": "worker_state", "worker_id": 2, "state": "unreachable"})
    wait_until(lambda: '"unreachable"' in (d.client.rt.cluster.worker_row(2) or ""), 60, "worker 2 down")
    assert d.client.submit(llm_request("placed"), wait=True, timeout=60)["status"] == "scheduled"  # type: ignore[index]
    nowhere = llm_request("nowhere", worker_selector={"gpu": "nowhere"})
    parked = d.client.submit(nowhere, wait=True, timeout=60)
    assert parked["status"] == "unschedulable"  # type: ignore[index]

    text = _cli(d, "describe", "placed")
    assert text.returncode == 0, text.stderr
    assert "Placement:" in text.stdout and "node-0001 (#1)" in text.stdout
    assert "Why not placed:" not in text.stdout
    assert all(len(line) <= 100 for line in text.stdout.splitlines())
    placed = json.loads(_cli(d, "describe", "placed", "--json").stdout)
    assert placed["status"] == "scheduled" and [r["worker"] for r in placed["placement"]] == ["node-0001"]
    assert [e["type"] for e in placed["events"]][-1] == "sched.result.published"
    why = json.loads(_cli(d, "describe", "nowhere", "--json").stdout)["why_not"]
    assert why["blocked_by"] == "label_mismatch" and why["parked_reasons"] == ["label_mismatch"]
    missing = _cli(d, "describe", "nosuch")
    assert missing.returncode == 2 and "nosuch" in missing.stderr and missing.stderr.count("\n") == 1

    shown = _cli(d, "cluster", "show")
    assert shown.returncode == 0, shown.stderr
    assert "2 workers (1 ready, 1 not ready), 4 GPUs" in shown.stdout and "!node-0002" in shown.stdout
    assert "label_mismatch" in shown.stdout and all(len(line) <= 100 for line in shown.stdout.splitlines())
    one = json.loads(_cli(d, "cluster", "show", "--json", "--worker", "node-0001").stdout)
    assert [w["name"] for w in one["workers"]] == ["node-0001"]
    assert sum(g["booked"] for g in one["workers"][0]["gpus"]) == sum(
        sum(claims.values()) for claims in d.client.rt.cluster.claims().values()
    )
    per_gpu = _cli(d, "cluster", "show", "--gpus", "--gpu-type", "4090", "--state", "ready")
    assert per_gpu.stdout.count("cuda:") == 2 and "node-0002" not in per_gpu.stdout

    # --sort and --limit order and cut the JSON as they do the table (not ready first: worker 2)
    by_state = json.loads(_cli(d, "cluster", "show", "--json", "--sort", "state").stdout)
    assert [w["id"] for w in by_state["workers"]] == [2, 1]
    first = json.loads(_cli(d, "cluster", "show", "--json", "--sort", "state", "--limit", "1").stdout)
    assert [w["id"] for w in first["workers"]] == [2] and first["summary"]["workers"] == 2
    none = json.loads(_cli(d, "cluster", "show", "--json", "--limit", "0").stdout)
    assert none["workers"] == [] and none["summary"]["workers"] == 2


def test_a_reused_request_id_with_another_body_is_a_conflict_at_the_command_line(
    deployment: Callable[..., Deployment], tmp_path: Path,
) -> None:
    d = deployment()
    d.start_workers(1)
    d.client.apply_cluster(cluster(1, 1))
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    first.write_text(json.dumps(llm_request("same-id")))
    second.write_text(json.dumps(llm_request("same-id", name="another-model")))
    assert _cli(d, "submit", str(first), "--wait").returncode == 0
    again = _cli(d, "submit", str(first))
    assert again.returncode == 0 and json.loads(again.stdout)["status"] == "duplicate"
    conflict = _cli(d, "submit", str(second))
    assert conflict.returncode == 2 and conflict.stderr.count("\n") == 1
    answer = json.loads(conflict.stdout)
    assert answer["status"] == "conflict" and answer["digest"] != answer["stored_digest"]
    assert answer["stored_digest"] in conflict.stderr and answer["digest"] in conflict.stderr
    assert len(d.events("sched.request.conflict")) == 1
    assert [e["request_id"] for e in d.events("sched.decision.made")] == ["same-id"]


def test_waiting_on_a_reused_request_id_answers_the_conflict_not_the_other_requests_result(
    deployment: Callable[..., Deployment], tmp_path: Path,
) -> None:
    d = deployment()
    d.start_workers(1)
    d.client.apply_cluster(cluster(1, 1))
    first = d.client.submit(llm_request("same-id"), wait=True, timeout=60)
    assert first["status"] == "scheduled"  # type: ignore[index]
    second = tmp_path / "second.json"
    second.write_text(json.dumps(llm_request("same-id", name="another-model")))

    waited = _cli(d, "submit", str(second), "--wait", "--timeout", "60")
    assert waited.returncode == 2 and waited.stderr.count("\n") == 1, (waited.stdout, waited.stderr)
    answer = json.loads(waited.stdout)
    assert answer["status"] == "conflict" and answer["stored_digest"] in waited.stderr
    assert "placement" not in answer  # not the first request's scheduled result

    outcome = d.client.submit(llm_request("same-id", name="another-model"), wait=True, timeout=60)
    assert isinstance(outcome, Submission) and outcome.status == "conflict"
    assert outcome.digest == answer["digest"] and outcome.stored_digest == answer["stored_digest"]
    assert [e["request_id"] for e in d.events("sched.decision.made")] == ["same-id"]


def test_cluster_export_names_the_data_generation_redis_holds_without_creating_one(
    deployment: Callable[..., Deployment],
) -> None:
    d = deployment()
    empty = _cli(d, "cluster", "export")  # a fresh Redis: no generation yet, and the export writes none
    assert empty.returncode == 0, empty.stderr
    assert json.loads(empty.stdout)["exported"]["generation"] is None
    assert d.redis.get(d.keys.generation) is None

    d.start_workers(1)  # the worker writes the first generation
    d.client.apply_cluster(cluster(1, 1))
    assert d.client.submit(llm_request("kept"), wait=True, timeout=60)["status"] == "scheduled"  # type: ignore[index]
    generation = wait_until(lambda: d.redis.get(d.keys.generation), 60, "the data generation")
    backup = _cli(d, "cluster", "export")  # a fresh process: it knows no generation of its own
    assert backup.returncode == 0, backup.stderr
    exported = json.loads(backup.stdout)
    assert exported["exported"]["generation"] == json.loads(generation)["id"]
    assert exported["exported"]["cluster_version"] == d.client.rt.cluster.version()
    assert [b["request_id"] for b in exported["bookings"]] == ["kept"]
