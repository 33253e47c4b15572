"""The bridge's own Prometheus metrics (a registry of its own, served on ``gpustack_metrics_port``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REGISTRY = CollectorRegistry(auto_describe=True)

WRITES = Counter(
    "gpusched_gpustack_writes",
    "PUTs the bridge made to GPUStack, by what they wrote",
    ["what"],
    registry=REGISTRY,
)
WRITE_ERRORS = Counter(
    "gpusched_gpustack_write_errors",
    "GPUStack calls that failed, by HTTP status or kind",
    ["status"],
    registry=REGISTRY,
)
SUBMITTED = Counter(
    "gpusched_gpustack_requests", "Requests the bridge submitted to gpusched", registry=REGISTRY
)
CANCELLED = Counter(
    "gpusched_gpustack_cancels", "Requests cancelled because their instance was deleted", registry=REGISTRY
)
OVERWRITTEN = Counter(
    "gpusched_gpustack_overwritten", "Instances another scheduler placed after gpusched", registry=REGISTRY
)
REFUSED_ROWS = Counter(
    "gpusched_gpustack_rows_refused", "Rows from GPUStack refused as invalid", ["kind"], registry=REGISTRY
)
RECONNECTS = Counter(
    "gpusched_gpustack_resyncs", "Re-syncs after a watch (re)connected", ["kind"], registry=REGISTRY
)
SHADOW = Counter(
    "gpusched_gpustack_shadow_decisions",
    "Shadow comparisons with GPUStack's own decisions",
    ["verdict"],
    registry=REGISTRY,
)
PLACE_LATENCY = Histogram(
    "gpusched_gpustack_place_seconds",
    "Instance created in GPUStack to its placement written",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
    registry=REGISTRY,
)
UP = Gauge("gpusched_gpustack_connected", "1 while every watch stream is connected", registry=REGISTRY)


def serve(port: int, host: str) -> None:
    """Serve ``/metrics`` (0: not at all)."""
    if port:
        start_http_server(port, addr=host, registry=REGISTRY)
