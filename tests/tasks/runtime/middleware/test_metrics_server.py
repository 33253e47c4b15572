"""A node's ``/metrics`` and ``/healthz`` (served from a thread of the node's main process)."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

from service_builders import small_request, uniform_cluster

from tasks.edges.localrun import free_port
from tasks.runtime.middleware.metrics_server import MetricsServer
from tasks.testing import Harness, isolated_settings


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_node_serves_metrics_and_health_and_stops_on_shutdown() -> None:
    port = free_port()
    h = Harness(settings=isolated_settings(metrics_port=port, metrics_host="127.0.0.1"))
    h.apply(uniform_cluster())
    h.submit(small_request("r", worker_selector={"gpu": "nowhere"}))
    h.pump()
    server = MetricsServer()
    server.after_worker_boot("n1@host", lambda: h.rt)
    try:
        status, text = _get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        assert 'gpusched_parked_requests{reason="label_mismatch"} 1.0' in text
        assert "gpusched_redis_up 1.0" in text
        status, body = _get(f"http://127.0.0.1:{port}/healthz")
        verdict = json.loads(body)
        assert status == 200 and verdict["status"] == "ok"  # booted just now: the drainer is starting
        assert [c["name"] for c in verdict["checks"]] == ["redis", "data", "drainer"]
        assert _get(f"http://127.0.0.1:{port}/other")[0] == 404
    finally:
        server.before_worker_shutdown("n1@host", lambda: h.rt)
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # the port is free again


def test_a_taken_port_is_logged_and_the_node_runs_on() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        h = Harness(settings=isolated_settings(metrics_port=port, metrics_host="127.0.0.1"))
        server = MetricsServer()
        server.after_worker_boot("n1@host", lambda: h.rt)  # no exception: the worker keeps running
        server.before_worker_shutdown("n1@host", lambda: h.rt)
