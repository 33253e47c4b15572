"""``/metrics``, ``/healthz`` and ``gpusched health`` with a real worker node and a Redis we can kill."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from service.conftest import require_redis_server
from service.support import Deployment, cluster, llm_request, wait_until

from tasks.edges.localrun import RedisServer, free_port, start_redis

pytestmark = pytest.mark.service

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own (it is stopped mid-test)."""
    require_redis_server()
    server = start_redis(directory=tmp_path / "redis")
    yield server
    server.stop()


def _samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _healthz(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tasks.edges.cli", *args]
    return subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


def test_a_worker_node_serves_domain_metrics_and_health_until_redis_goes_away(
    own_redis: RedisServer, tmp_path: Path,
) -> None:
    d = Deployment(own_redis.url, tmp_path, {})
    try:
        no_worker = _cli(d.env, "health")
        assert no_worker.returncode == 1 and no_worker.stderr.count("\n") == 1
        assert "no live worker node" in no_worker.stderr

        port = free_port()
        d.start_workers(1, env={"GPUSCHED_METRICS_PORT": str(port), "GPUSCHED_METRICS_HOST": "127.0.0.1",
                                "GPUSCHED_WORKER_CONCURRENCY": "2"})
        base = f"http://127.0.0.1:{port}"
        d.client.apply_cluster(cluster(1, 2))  # two GPUs: two 7B instances, the third parks
        for rid in ("m1", "m2", "m3"):
            d.client.submit(llm_request(rid), wait=True, timeout=60)
        wait_until(lambda: d.settled({"m1", "m2", "m3"}), 60, "the three decisions")

        samples = _samples(f"{base}/metrics")  # summed over the node's two pool processes
        assert samples[("gpusched_decisions_total", (("status", "scheduled"),))] == 2
        assert samples[("gpusched_decisions_total", (("status", "unschedulable"),))] == 1
        assert samples[("gpusched_decision_seconds_count", ())] == 3
        assert samples[("gpusched_submit_to_result_seconds_count", ())] == 2  # the parked one has none yet
        assert samples[("gpusched_parked_requests", (("reason", "insufficient_vram"),))] == 1
        assert samples[("gpusched_cluster_version", ())] == d.client.rt.cluster.version()
        assert samples[("gpusched_cluster_workers", (("state", "ready"),))] == 1
        assert samples[("gpusched_ledger_overbooked_gpus", ())] == 0
        assert samples[("gpusched_redis_up", ())] == 1
        assert any(name == "gpusched_node_heartbeat_age_seconds" for name, _ in samples)

        d.client.cluster_event({"kind": "instance_deleted", "request_id": "m1"})  # m3 is woken and placed
        wait_until(lambda: _samples(f"{base}/metrics").get(("gpusched_wakeups_total", ())) == 1, 60,
                   "the wake-up counted")

        status, body = _healthz(f"{base}/healthz")
        assert status == 200 and body["status"] == "ok"
        wait_until(lambda: _cli(d.env, "health").returncode == 0, 60, "the deployment healthy")
        assert _cli(d.env, "health", "--endpoint", f"{base}/healthz").returncode == 0

        own_redis.stop()
        status, body = _healthz(f"{base}/healthz")
        assert status == 503 and body["status"] == "unhealthy"
        assert _samples(f"{base}/metrics")[("gpusched_redis_up", ())] == 0
        down = _cli(d.env, "health")
        assert down.returncode == 1 and down.stderr.count("\n") == 1
        assert "Redis does not answer" in down.stderr
        node = _cli(d.env, "health", "--endpoint", f"{base}/healthz")
        assert node.returncode == 1 and "Redis does not answer" in node.stderr
        gone = _cli(d.env, "health", "--endpoint", f"http://127.0.0.1:{free_port()}/healthz")
        assert gone.returncode == 1 and "cannot reach" in gone.stderr
    finally:
        d.stop()


def test_a_message_refused_at_the_broker_door_is_counted_as_a_dead_letter(
    deployment: Callable[..., Deployment],
) -> None:
    # the door runs in the node's main (consumer) process, not in a pool process
    d = deployment()
    port = free_port()
    d.start_workers(1, env={"GPUSCHED_METRICS_PORT": str(port), "GPUSCHED_METRICS_HOST": "127.0.0.1"})
    d.client.apply_cluster(cluster(1, 2))
    d.redis.lpush(d.keys.requests_queue, b"this is not json")
    d.redis.lpush(d.keys.requests_queue, b"{}")
    d.client.submit(llm_request("after-junk"), wait=True, timeout=60)  # the node read past the junk
    wait_until(lambda: d.redis.xlen(d.keys.deadletter) == 2, 60, "both refusals dead-lettered")

    samples = _samples(f"http://127.0.0.1:{port}/metrics")
    assert samples[("gpusched_dead_letters_total", (("reason", "invalid_json"),))] == 1
    assert samples[("gpusched_dead_letters_total", (("reason", "malformed_envelope"),))] == 1
    assert samples[("gpusched_deadletter_entries", ())] == 2
