"""The operator's one-step answers from the CLI, ``-o text|json``, and issue 20's footguns, on real processes.

"What holds GPU 3 of worker h100-a", "what is parked and why", "what moved in
the last hour" each take one command; each footgun is guarded; the read-only
console user reads everything the console shows and writes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from service.conftest import require_redis_server
from service.console_support import feed_events_seen, h100_worker
from service.support import FAST, Deployment, llm_request, wait_until, worker_row

from tasks.base.keys import Keys
from tasks.base.settings import Settings
from tasks.edges.localrun import RedisServer, start_redis
from tasks.runtime.acl import USERS, acl_line

pytestmark = pytest.mark.service

ROOT = Path(__file__).resolve().parents[2]


def _cli(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tasks.edges.cli", *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120, cwd=ROOT, input=stdin)


def _cluster() -> dict[str, Any]:
    spare = worker_row(3, 2, labels={"gpu": "4090"})
    spare["name"] = "node-4090"
    return {"workers": [h100_worker(1, "h100-a"), h100_worker(2, "h100-b"), spare], "model_instances": []}


def test_one_step_answers_and_every_output_format(
    deployment: Callable[..., Deployment], tmp_path: Path,
) -> None:
    d = deployment(unreachable_grace_s=1, ready_stable_s=1)
    d.start_workers(1)
    d.client.apply_cluster(_cluster())
    pinned = llm_request("pinned-3", gpu_selector={"gpu_ids": ["h100-a:cuda:3"]})
    d.client.submit(pinned, wait=True, timeout=60)
    d.client.submit(llm_request("to-move", tp=2, worker_selector={"gpu": "h100"}), wait=True, timeout=60)
    d.client.submit(llm_request("waits-a100", worker_selector={"gpu": "a100"}), wait=True, timeout=60)

    # what holds GPU 3 of worker h100-a
    shown = _cli(d.env, "cluster", "show", "--worker", "h100-a", "--holders")
    assert shown.returncode == 0, shown.stderr
    gpu3 = next(line for line in shown.stdout.splitlines() if line.split()[:1] == ["cuda:3"])
    assert "pinned-3 " in gpu3
    view = json.loads(_cli(d.env, "cluster", "show", "--holders", "-o", "json").stdout)
    h100_a = next(w for w in view["workers"] if w["name"] == "h100-a")
    assert [h["request_id"] for h in h100_a["gpus"][3]["holders"]] == ["pinned-3"]

    # what is parked and why
    parked = _cli(d.env, "list", "--state", "parked")
    assert parked.returncode == 0, parked.stderr
    row = next(line for line in parked.stdout.splitlines() if line.strip().startswith("waits-a100"))
    assert "parked" in row and "waits for label_mismatch" in row
    assert "Parked by reason: label_mismatch 1" in parked.stdout

    # what moved in the last hour
    held = d.client.rt.cluster.instance_meta()["req:to-move"].workers[0]
    d.client.cluster_event({"kind": "worker_state", "worker_id": held, "state": "unreachable"})
    wait_until(lambda: d.client.rt.records.record("to-move").get("moved_to"), 60, "to-move moved")
    moved = json.loads(_cli(d.env, "list", "--state", "moved", "--since", "1h", "--json").stdout)
    assert [(r["request_id"], r["moved_to"]) for r in moved["requests"]] == [("to-move", "to-move~1")]

    # -o json everywhere it was asked for; text views where text is the default
    example = str(ROOT / "examples" / "01-single-4090.json")
    assert json.loads(_cli({}, "schedule", example).stdout)["status"] == "scheduled"
    assert _cli({}, "schedule", example, "-o", "text").stdout.startswith("■ ")
    assert json.loads(_cli(d.env, "describe", "to-move", "-o", "json").stdout)["moved_to"] == "to-move~1"
    wait_until(lambda: _cli(d.env, "health").returncode == 0, 60, "healthy")
    health = json.loads(_cli(d.env, "health", "-o", "json").stdout)
    checks = [c["name"] for c in health["checks"]]
    assert health["status"] == "ok" and checks == ["redis", "data", "workers", "replication"]
    replayed = json.loads(_cli(d.env, "replay", "-o", "json").stdout)
    assert replayed["differ"] == 0 and replayed["replayed"] == replayed["identical"] > 0
    passwords = {"REDIS_SERVICE_PASSWORD": "a", "REDIS_CONTROL_PASSWORD": "b", "REDIS_SUBMIT_PASSWORD": "c"}
    users = json.loads(_cli(passwords, "acl", "-o", "json").stdout)["users"]
    assert [u["user"] for u in users] == ["default", *USERS.values()][:4]
    with_console = json.loads(_cli({**passwords, "REDIS_CONSOLE_PASSWORD": "d"}, "acl", "-o", "json").stdout)
    assert with_console["users"][-1]["user"] == "gpusched-console"
    listed = _cli(d.env, "submit", str(_write(tmp_path, "again.json", pinned)), "--wait", "-o", "text")
    assert listed.returncode == 0 and listed.stdout.split()[:2] == ["pinned-3", "scheduled"]


def _write(folder: Path, name: str, document: Any) -> Path:
    path = folder / name
    path.write_text(json.dumps(document))
    return path


def test_submit_wait_says_a_scheduled_result_no_longer_holds_gpus(
    deployment: Callable[..., Deployment], tmp_path: Path,
) -> None:
    d = deployment()
    d.start_workers(1)
    d.client.apply_cluster(_cluster())
    request = _write(tmp_path, "r.json", llm_request("released-since"))
    first = _cli(d.env, "submit", str(request), "--wait")
    assert first.returncode == 0 and first.stderr == ""
    assert _cli(d.env, "cancel", "released-since").returncode == 0  # placed, then released
    again = _cli(d.env, "submit", str(request), "--wait")
    assert again.returncode == 0
    assert json.loads(again.stdout)["status"] == "scheduled"  # the published result, unchanged (Contract 1)
    assert again.stderr.strip() == ("gpusched: note: released-since: its placement was released since "
                                    "(cancelled or deleted): this result holds no GPUs")
    text = _cli(d.env, "submit", str(request), "--wait", "-o", "text")
    assert "note: its placement was released since" in text.stdout


def test_recover_refuses_to_supersede_a_live_generation_without_force(
    deployment: Callable[..., Deployment], tmp_path: Path,
) -> None:
    d = deployment()
    d.start_workers(1)
    d.client.apply_cluster(_cluster())
    backup = _cli(d.env, "cluster", "export")
    assert backup.returncode == 0
    path = tmp_path / "backup.json"
    path.write_text(backup.stdout)
    generation = d.redis.get(d.keys.generation)
    refused = _cli(d.env, "cluster", "apply", "--recover", str(path))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "holds the live data generation" in refused.stderr and "--force" in refused.stderr
    assert d.redis.get(d.keys.generation) == generation  # nothing superseded
    forced = _cli(d.env, "cluster", "apply", "--recover", "--force", str(path))
    assert forced.returncode == 0, forced.stderr
    assert d.redis.get(d.keys.generation) != generation
    d.redis.delete(d.keys.generation)  # a Redis that lost its generation: what --recover is for
    assert _cli(d.env, "cluster", "apply", "--recover", str(path)).returncode == 0


def test_suspended_rescheduling_shows_in_cluster_show_health_and_metrics(
    deployment: Callable[..., Deployment],
) -> None:
    d = deployment(unreachable_grace_s=1, ready_stable_s=1)
    d.start_workers(1)
    d.client.apply_cluster(_cluster())
    d.client.submit(llm_request("on-a", gpu_selector={"gpu_ids": ["h100-a:cuda:0"]}), wait=True, timeout=60)
    d.client.submit(llm_request("on-b", gpu_selector={"gpu_ids": ["h100-b:cuda:0"]}), wait=True, timeout=60)
    for worker in (1, 2):  # two of three workers down: above max_unreachable_fraction 0.5
        d.client.cluster_event({"kind": "worker_state", "worker_id": worker, "state": "unreachable"})
    wait_until(lambda: d.redis.exists(d.keys.reschedule_suspended), 60, "rescheduling suspended")
    shown = _cli(d.env, "cluster", "show")
    assert "Rescheduling SUSPENDED: 2 down and 0 vanished of 3 workers" in shown.stdout
    assert json.loads(_cli(d.env, "cluster", "show", "--json").stdout)["rescheduling"]["suspended"] is True
    wait_until(lambda: _cli(d.env, "health").returncode == 0, 60, "healthy (a warning, not a failure)")
    health = _cli(d.env, "health")
    assert "warning: Rescheduling SUSPENDED" in health.stdout
    assert json.loads(_cli(d.env, "health", "-o", "json").stdout)["rescheduling"]["suspended"] is True


PASSWORDS = {"service": "service-secret", "submit": "submit-secret", "console": "console-secret"}


@pytest.fixture
def acl_redis(tmp_path: Path) -> Iterator[RedisServer]:
    require_redis_server()
    server = start_redis(directory=tmp_path / "redis")
    admin = redis.Redis.from_url(server.url)
    for role, password in PASSWORDS.items():
        _, name, *rules = acl_line(role, password, Keys(None)).split(" ")
        admin.execute_command("ACL", "SETUSER", name, *rules)
    admin.execute_command("ACL", "SETUSER", "default", "off")
    admin.close()
    yield server
    server.stop()


def _as(role: str, url: str) -> dict[str, str]:
    return {"GPUSCHED_REDIS_URL": url, "GPUSCHED_REDIS_USERNAME": USERS[role],
            "GPUSCHED_REDIS_PASSWORD": PASSWORDS[role]}


def test_the_submitter_is_told_to_queue_and_the_console_user_reads_everything_and_writes_nothing(
    acl_redis: RedisServer, tmp_path: Path,
) -> None:
    service = {"redis_username": USERS["service"], "redis_password": PASSWORDS["service"]}
    d = Deployment(acl_redis.url, tmp_path, service)
    try:
        d.client.apply_cluster(_cluster())
        d.start_workers(1)
        d.client.submit(llm_request("placed"), wait=True, timeout=60)
        request = _write(tmp_path, "r.json", llm_request("by-submitter"))
        refused = _cli(_as("submit", acl_redis.url), "submit", str(request))
        assert refused.returncode == 1 and refused.stderr.count("\n") == 1
        assert "GPUSCHED_SUBMIT_VIA=queue" in refused.stderr and "submit-secret" not in refused.stderr

        from tasks.edges.console import data
        from tasks.edges.request_list import ListQuery
        from tasks.state.context import build_runtime, redis_client

        settings = Settings(redis_url=acl_redis.url, redis_username=USERS["console"],
                            redis_password=PASSWORDS["console"], **FAST)  # type: ignore[arg-type]
        rt = build_runtime(settings, lambda *_: None, lambda *_: None)
        assert [w["name"] for w in data.map_data(rt)["workers"]] == ["h100-a", "h100-b", "node-4090"]
        assert data.worker_data(rt, "h100-a") is not None
        assert [r["request_id"] for r in data.requests_data(rt, ListQuery())["requests"]] == ["placed"]
        assert data.request_data(rt, "placed")["placement"]  # type: ignore[index]
        health = data.health_data(rt)
        assert health["checks"][0]["ok"] and all(g["name"] != "error" for g in health["gauges"])
        assert data.replay_status(rt)["events"] > 0
        assert feed_events_seen(redis_client(settings, blocking=True, max_block_ms=500), d.keys.events) > 0
        for write in (lambda: rt.client.set(d.keys.version, 0), lambda: rt.client.hset(d.keys.booked, "x", 1),
                      lambda: rt.client.lpush(d.keys.requests_queue, "x"),
                      lambda: rt.client.evalsha("0" * 40, 0)):
            with pytest.raises(redis.exceptions.NoPermissionError):
                write()
    finally:
        d.stop()
