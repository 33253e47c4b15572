"""Each worker node serves ``/metrics`` (Prometheus) and ``/healthz`` on ``metrics_port``.

Started on the node's boot, in its main process, on a thread of its own
(one request at a time: a scrape every few seconds needs no more, and the
thread keeps one runtime). ``/metrics`` holds the domain counters of every
process of the node (``prometheus-client``'s multiprocess mode, see
:mod:`tasks.runtime.metrics`) and the partition's state read from Redis;
``/healthz`` answers 200 or 503 with the verdict of
:data:`tasks.runtime.health.NODE_CHECKS` as JSON. ``metrics_port = 0`` turns
both off; a port already taken is logged and the node runs on without them.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import redis

from tasks.runtime import health, liveness, metrics
from tasks.runtime.logging import get_logger
from tasks.runtime.middleware.base import Middleware, RuntimeFactory

log = get_logger(__name__)


class _StateCollector:
    """Collects the partition's state gauges at scrape time (``gpusched_redis_up`` 0 when unreachable)."""

    def __init__(self, runtime: RuntimeFactory) -> None:
        self._runtime = runtime

    def describe(self) -> list[Any]:
        """Nothing up front: the registry must not read Redis when the collector is registered."""
        return []

    def collect(self) -> Iterator[Any]:
        """The state families, then whether Redis answered."""
        from prometheus_client.core import GaugeMetricFamily

        up = 1
        try:
            yield from list(metrics.state_families(self._runtime()))
        except (redis.RedisError, OSError) as error:
            log.warning("metrics_state_unavailable", error=repr(error))
            up = 0
        yield GaugeMetricFamily("gpusched_redis_up", "Whether Redis answered this scrape", value=up)


class _ProcessCollectors:
    """This process's default registry (a node without multiprocess mode, e.g. the solo pool)."""

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client import REGISTRY

        yield from REGISTRY.collect()


def node_registry(runtime: RuntimeFactory) -> Any:
    """The registry ``/metrics`` renders: every process of the node, plus the partition's state."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    if os.environ.get(metrics.MULTIPROC_ENV):
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(_ProcessCollectors())
    registry.register(_StateCollector(runtime))
    return registry


def _handler(runtime: RuntimeFactory, registry: Any) -> type[BaseHTTPRequestHandler]:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, generate_latest(registry))
            elif path == "/healthz":
                verdicts = health.run_checks(runtime(), health.NODE_CHECKS)
                healthy = health.first_failure(verdicts) is None
                body = {"status": "ok" if healthy else "unhealthy",
                        "checks": [{"name": v.name, "ok": v.ok, "detail": v.detail} for v in verdicts]}
                self._send(200 if healthy else 503, "application/json", json.dumps(body).encode())
            else:
                self._send(404, "text/plain", b"/metrics or /healthz\n")

        def _send(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Scrapes are not logged (one line per scrape would drown the node's log)."""

    return Handler


class MetricsServer(Middleware):
    """Serves ``/metrics`` and ``/healthz`` from boot to shutdown."""

    def __init__(self) -> None:
        self._server: HTTPServer | None = None

    def after_worker_boot(self, node: str, runtime: RuntimeFactory) -> None:
        """Bind ``metrics_host:metrics_port`` and serve on a daemon thread."""
        liveness.mark(health.BOOTED)
        settings = runtime().settings
        if not settings.metrics_port:
            return
        try:
            server = HTTPServer((settings.metrics_host, settings.metrics_port),
                                _handler(runtime, node_registry(runtime)))
        except OSError as error:
            log.error("metrics_port_unavailable", port=settings.metrics_port, error=repr(error),
                      hint="set GPUSCHED_METRICS_PORT to a free port (0 turns /metrics and /healthz off)")
            return
        self._server = server
        threading.Thread(target=server.serve_forever, name="gpusched-metrics", daemon=True).start()
        log.info("metrics_serving", node=node, port=server.server_address[1])

    def before_worker_shutdown(self, node: str, runtime: RuntimeFactory) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
