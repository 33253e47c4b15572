"""Each worker node serves ``/metrics`` (Prometheus) and ``/healthz`` on ``metrics_port``.

Started on the node's boot, in its main process. The server is
``prometheus-client``'s own thread-per-request WSGI server
(``ThreadingWSGIServer``, what its ``start_http_server`` runs) with two
bounds of ours, so a stalled Redis or a stuck client can never make a scrape
hang (a scrape that never answers never shows ``gpusched_redis_up 0``):

* **Redis reads are bounded** (:class:`StateProbe`): the partition's state
  gauges and the health checks are read on one probe thread of the node's,
  one read at a time; a scrape waits for it at most ``metrics_redis_timeout_s``
  (default 2 s, well below Prometheus's default 10 s scrape timeout) and
  then answers without Redis (``gpusched_redis_up 0``, ``/healthz`` 503).
  Scrapes arriving while a read is in flight share it instead of queueing
  more reads behind a stalled server.
* **Connections are bounded**: at most ``metrics_max_connections`` requests
  are served at once (more get an immediate 503), and a client that sends
  nothing for :data:`CLIENT_TIMEOUT_S` is dropped.

A client that hangs up early (a scrape timeout on Prometheus's side: the
answer's write meets a broken pipe or a reset) and any error while serving
is one log line (``metrics_client_error``), never a traceback.

``/metrics`` holds the domain counters of every process of the node
(``prometheus-client``'s multiprocess mode, see :mod:`tasks.flows.metrics`)
and the partition's state read from Redis; ``/healthz`` answers 200 or 503
with the verdict of :data:`tasks.runtime.health.NODE_CHECKS` as JSON.
``metrics_port = 0`` turns both off; a port already taken is logged and the
node runs on without them.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar
from wsgiref.simple_server import WSGIRequestHandler

import redis

from tasks.base import liveness
from tasks.base.logging import get_logger
from tasks.flows import metrics
from tasks.runtime import health
from tasks.runtime.middleware.base import Middleware, RuntimeFactory
from tasks.state.context import Runtime

log = get_logger(__name__)

T = TypeVar("T")
#: Seconds a connected client may stay silent before it is dropped (a scrape sends its request at once).
CLIENT_TIMEOUT_S = 5.0
#: The answer to a request over the connection bound (written on the accepting thread, then closed).
_BUSY = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n"
         b"Connection: close\r\n\r\nbusy\n")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class ProbeTimeout(Exception):
    """Redis did not answer within the probe's budget (the read goes on in the background)."""


class StateProbe:
    """Runs Redis reads for ``/metrics`` and ``/healthz`` on one thread, waiting at most ``budget`` s each.

    One probe thread means one runtime (the node's runtime factory builds one
    per thread) and one read at a time: a second scrape of the same kind
    while a read is in flight waits for that read instead of queueing
    another, so a stalled Redis holds one read, not one per scrape.
    """

    def __init__(self, runtime: RuntimeFactory, budget_s: float) -> None:
        self._runtime = runtime
        self._budget = budget_s
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpusched-probe")
        self._lock = threading.Lock()
        self._inflight: dict[str, Future[Any]] = {}

    @property
    def budget_s(self) -> float:
        """The longest a caller waits for one read."""
        return self._budget

    def read(self, name: str, work: Callable[[Runtime], T]) -> T:
        """``work(runtime)`` on the probe thread (joining an unfinished read named ``name``).

        Raises:
            ProbeTimeout: no answer within the budget.
            redis.RedisError, OSError: the read failed.
        """
        with self._lock:
            future = self._inflight.get(name)
            if future is None or future.done():
                future = self._executor.submit(lambda: work(self._runtime()))
                self._inflight[name] = future
        try:
            return future.result(timeout=self._budget)  # type: ignore[no-any-return]
        except FutureTimeout:
            raise ProbeTimeout(f"Redis did not answer within {self._budget:g} s") from None

    def close(self) -> None:
        """Stop taking reads (one still running finishes on its own daemon thread)."""
        self._executor.shutdown(wait=False, cancel_futures=True)


class _StateCollector:
    """Collects the partition's state gauges at scrape time (``gpusched_redis_up`` 0 when unreachable)."""

    def __init__(self, probe: StateProbe) -> None:
        self._probe = probe

    def describe(self) -> list[Any]:
        """Nothing up front: the registry must not read Redis when the collector is registered."""
        return []

    def collect(self) -> Iterator[Any]:
        """The state families, then whether Redis answered within the budget."""
        from prometheus_client.core import GaugeMetricFamily

        up = 1
        try:
            yield from self._probe.read("metrics", lambda rt: list(metrics.state_families(rt)))
        except (ProbeTimeout, redis.RedisError, OSError) as error:
            log.warning("metrics_state_unavailable", error=f"{type(error).__name__}: {error}")
            up = 0
        yield from metrics.node_families()
        yield GaugeMetricFamily("gpusched_redis_up", "Whether Redis answered this scrape in time", value=up)


class _ProcessCollectors:
    """This process's default registry (a node without multiprocess mode, e.g. the solo pool)."""

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client import REGISTRY

        yield from REGISTRY.collect()


def node_registry(probe: StateProbe) -> Any:
    """The registry ``/metrics`` renders: every process of the node, plus the partition's state."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    if os.environ.get(metrics.MULTIPROC_ENV):
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(_ProcessCollectors())
    registry.register(_StateCollector(probe))
    return registry


def health_verdict(probe: StateProbe) -> tuple[int, dict[str, Any]]:
    """``/healthz``'s status code and body: the node checks, or Redis's silence within the budget."""
    try:
        verdicts = probe.read("health", lambda rt: health.run_checks(rt, health.NODE_CHECKS))
    except ProbeTimeout as error:
        verdicts = [health.Check("redis", False, f"Redis does not answer ({error})")]
    healthy = health.first_failure(verdicts) is None
    body = {"status": "ok" if healthy else "unhealthy",
            "checks": [{"name": v.name, "ok": v.ok, "detail": v.detail} for v in verdicts]}
    return (200 if healthy else 503), body


def node_app(probe: StateProbe) -> WsgiApp:
    """The WSGI app: ``/metrics`` (prometheus-client's own exposition), ``/healthz``, else 404."""
    from prometheus_client import make_wsgi_app

    exposition = make_wsgi_app(node_registry(probe))

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return exposition(environ, start_response)  # type: ignore[no-any-return]
        if path == "/healthz":
            status, body = health_verdict(probe)
            return _answer(start_response, status, "application/json", json.dumps(body).encode())
        return _answer(start_response, 404, "text/plain", b"/metrics or /healthz\n")

    return app


_REASONS = {200: "OK", 404: "Not Found", 500: "Internal Server Error", 503: "Service Unavailable"}


def _answer(start_response: Callable[..., Any], status: int, content_type: str, body: bytes) -> list[bytes]:
    start_response(f"{status} {_REASONS[status]}",
                   [("Content-Type", content_type), ("Content-Length", str(len(body)))])
    return [body]


def _guarded(app: WsgiApp) -> WsgiApp:
    """``app`` with any exception turned into a 500 and one log line (wsgiref would print a traceback)."""

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        try:
            return list(app(environ, start_response))
        except Exception as error:
            log.error("metrics_request_failed", path=environ.get("PATH_INFO", ""),
                      error=f"{type(error).__name__}: {error}")
            return _answer(start_response, 500, "text/plain", b"internal error\n")

    return guarded


class _QuietHandler(WSGIRequestHandler):
    """No access log (one line per scrape would drown the node's log); silent clients are dropped."""

    timeout = CLIENT_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged."""


def _server_class() -> type[Any]:
    from prometheus_client.exposition import ThreadingWSGIServer

    class BoundedServer(ThreadingWSGIServer):
        """``ThreadingWSGIServer`` serving at most ``max_connections`` requests at once."""

        max_connections = 8

        def server_activate(self) -> None:
            self._slots = threading.BoundedSemaphore(self.max_connections)
            super().server_activate()

        def process_request(self, request: Any, client_address: Any) -> None:
            if not self._slots.acquire(blocking=False):
                _refuse(request)
                self.shutdown_request(request)
                return
            super().process_request(request, client_address)

        def process_request_thread(self, request: Any, client_address: Any) -> None:
            try:
                super().process_request_thread(request, client_address)
            finally:
                self._slots.release()

        def handle_error(self, request: Any, client_address: Any) -> None:
            """One line instead of socketserver's traceback (a client that hung up, typically)."""
            error = sys.exc_info()[1]
            log.info("metrics_client_error", error=f"{type(error).__name__}: {error}")

    return BoundedServer


def _refuse(request: socket.socket) -> None:
    try:
        request.settimeout(1.0)
        request.sendall(_BUSY)
    except OSError:
        pass


def make_server(host: str, port: int, app: WsgiApp, max_connections: int) -> Any:
    """A bound, not yet serving, server for ``app`` (raises OSError when the port is taken)."""
    server_class = _server_class()
    server_class.max_connections = max_connections
    server = server_class((host, port), _QuietHandler)
    server.set_app(_guarded(app))
    return server


class MetricsServer(Middleware):
    """Serves ``/metrics`` and ``/healthz`` from boot to shutdown."""

    def __init__(self) -> None:
        self._server: Any = None
        self._probe: StateProbe | None = None

    def after_worker_boot(self, node: str, runtime: RuntimeFactory) -> None:
        """Bind ``metrics_host:metrics_port`` and serve on a daemon thread."""
        liveness.mark(health.BOOTED)
        settings = runtime().settings
        if not settings.metrics_port:
            return
        probe = StateProbe(runtime, settings.metrics_redis_timeout_s)
        try:
            server = make_server(settings.metrics_host, settings.metrics_port, node_app(probe),
                                 settings.metrics_max_connections)
        except OSError as error:
            probe.close()
            log.error("metrics_port_unavailable", port=settings.metrics_port, error=repr(error),
                      hint="set GPUSCHED_METRICS_PORT to a free port (0 turns /metrics and /healthz off)")
            return
        self._server, self._probe = server, probe
        threading.Thread(target=server.serve_forever, name="gpusched-metrics", daemon=True).start()
        log.info("metrics_serving", node=node, port=server.server_address[1])

    def before_worker_shutdown(self, node: str, runtime: RuntimeFactory) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._probe is not None:
            self._probe.close()
            self._probe = None
