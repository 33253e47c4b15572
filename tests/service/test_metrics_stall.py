"""``/metrics`` and ``/healthz`` answer, bounded, while Redis is stalled (SIGSTOP), and log no traceback.

Issue 17 item 6: with the node's single-threaded server and unbounded Redis
reads, a scrape during a 46 s SIGSTOP timed out at 45 s (so Prometheus never
saw ``gpusched_redis_up 0``), and the scraper hanging up left raw
``BrokenPipeError`` tracebacks from ``socketserver`` in the worker's log.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from service.conftest import require_redis_server
from service.support import Deployment, cluster, llm_request, wait_until

from tasks.edges.localrun import RedisServer, free_port, start_redis

pytestmark = pytest.mark.service

#: What a scraper gives the node (Prometheus's default scrape timeout is 10 s).
SCRAPE_TIMEOUT_S = 8.0


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    require_redis_server()
    server = start_redis(directory=tmp_path / "redis")
    yield server
    if server.process is not None and server.process.poll() is None:
        os.kill(server.process.pid, signal.SIGCONT)
    server.stop()


def _get(url: str) -> tuple[int, str, float]:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as reply:
            return reply.status, reply.read().decode(), time.monotonic() - started
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), time.monotonic() - started


def _redis_up(text: str) -> float:
    return next(sample.value for family in text_string_to_metric_families(text)
                for sample in family.samples if sample.name == "gpusched_redis_up")


def _hang_up_after_asking(host: str, port: int, path: str) -> None:
    """Send a request, then reset the connection before the answer (a scraper that timed out)."""
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST


def test_scrapes_answer_within_the_budget_while_redis_is_stopped_and_leave_no_traceback(
    own_redis: RedisServer, tmp_path: Path,
) -> None:
    d = Deployment(own_redis.url, tmp_path, {})
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    try:
        d.start_workers(1, env={"GPUSCHED_METRICS_PORT": str(port), "GPUSCHED_METRICS_HOST": "127.0.0.1"})
        d.client.apply_cluster(cluster(1, 2))
        d.client.submit(llm_request("before-stall"), wait=True, timeout=60)
        status, text, _ = _get(f"{base}/metrics")
        assert status == 200 and _redis_up(text) == 1

        assert own_redis.process is not None
        os.kill(own_redis.process.pid, signal.SIGSTOP)
        try:
            answers: dict[str, tuple[int, str, float]] = {}

            def scrape(name: str, path: str) -> None:
                answers[name] = _get(f"{base}{path}")

            threads = [threading.Thread(target=scrape, args=(f"metrics-{i}", "/metrics")) for i in range(3)]
            threads += [threading.Thread(target=scrape, args=(f"health-{i}", "/healthz")) for i in range(2)]
            for thread in threads:
                thread.start()
            # scrapers that give up mid-answer (the node's writes meet a reset); with the five above
            # they fill the node's 8 connections (metrics_max_connections), none is refused
            for path in ("/metrics", "/metrics", "/healthz"):
                _hang_up_after_asking("127.0.0.1", port, path)
            for thread in threads:
                thread.join(SCRAPE_TIMEOUT_S + 5)
            time.sleep(3)  # the hung-up requests finish their (failing) writes
        finally:
            os.kill(own_redis.process.pid, signal.SIGCONT)

        assert sorted(answers) == ["health-0", "health-1", "metrics-0", "metrics-1", "metrics-2"]
        for name, (status, body, elapsed) in sorted(answers.items()):
            assert elapsed < SCRAPE_TIMEOUT_S, f"{name} took {elapsed:.1f} s"
            if name.startswith("metrics"):
                assert status == 200 and _redis_up(body) == 0, name
                assert "gpusched_build_info" in body  # what the node knows without Redis is still served
            else:
                verdict = json.loads(body)
                assert status == 503 and verdict["status"] == "unhealthy", name
                assert verdict["checks"][0] == {"name": "redis", "ok": False,
                                                "detail": verdict["checks"][0]["detail"]}
                assert "does not answer" in verdict["checks"][0]["detail"]

        wait_until(lambda: _redis_up(_get(f"{base}/metrics")[1]) == 1, 60, "redis_up back to 1")
        wait_until(lambda: _get(f"{base}/healthz")[0] == 200, 60, "/healthz healthy again")
        d.client.submit(llm_request("after-stall"), wait=True, timeout=60)
    finally:
        d.stop()
    log = (tmp_path / "worker-0.log").read_text(errors="replace")
    assert "Traceback" not in log
    assert "socketserver" not in log
    for line in log.splitlines():  # a client that hung up is one JSON line, nothing more
        if "BrokenPipeError" in line or "ConnectionResetError" in line:
            assert json.loads(line)["event"] == "metrics_client_error", line
