"""Helpers for the service tests: a deployment on a private redis-server with real workers.

Waits poll with generous deadlines: they wait for the system to converge and
fail only if it never does (no assertion depends on how fast it converges).
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis import exceptions as redis_errors

from tasks.base.keys import Keys
from tasks.base.settings import Settings
from tasks.edges.client import ServiceClient
from tasks.edges.localrun import WorkerProcess
from tasks.state.ledger import overbooked
from tasks.state.streams import iter_stream
from tasks.testing import booking_violations

GIB = 1 << 30
RTX_4090 = 26_015_170_560

#: Short timings so crash recovery (visibility timeout) happens within a test.
FAST = {
    "visibility_timeout_s": 10,
    "task_time_limit_s": 8,
    "task_soft_time_limit_s": 6,
    "unacked_restore_interval_s": 1,
    "max_countdown_s": 2,
    "outbox_lease_s": 3,
    "stuck_after_s": 15,
    "drain_interval_s": 0.1,
    "transient_backoff_s": 0.2,
    "conflict_retry_after_s": 0.5,
    "decide_lock_ttl_s": 2,
    "decide_lock_wait_s": 1,
    "redis_socket_timeout_s": 5,
    "log_level": "INFO",
}


def _env_value(value: Any) -> str:
    """A setting as an environment variable: lists and objects as JSON (pydantic-settings reads them so)."""
    return json.dumps(value) if isinstance(value, list | tuple | dict) else str(value)


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns a truthy value (returned) or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def worker_row(wid: int, gpus: int, total: int = RTX_4090, **extra: Any) -> dict[str, Any]:
    """A GPUStack worker row with ``gpus`` identical CUDA GPUs."""
    return {
        "id": wid,
        "name": f"node-{wid:04d}",
        "ip": f"10.1.{wid // 250}.{wid % 250}",
        "cluster_id": 1,
        "state": "ready",
        "labels": {"gpu": "4090"},
        "system_reserved": {"ram": 0, "vram": 0},
        "status": {
            "memory": {"total": 512 * GIB},
            "gpu_devices": [
                {
                    "uuid": f"GPU-{wid}-{i}",
                    "name": "RTX 4090",
                    "vendor": "nvidia",
                    "type": "cuda",
                    "index": i,
                    "memory": {"total": total},
                }
                for i in range(gpus)
            ],
        },
        **extra,
    }


def cluster(workers: int, gpus: int, total: int = RTX_4090) -> dict[str, Any]:
    """A snapshot of identical workers."""
    return {"workers": [worker_row(w, gpus, total) for w in range(1, workers + 1)], "model_instances": []}


def llm_request(rid: str, tp: int = 1, **model_fields: Any) -> dict[str, Any]:
    """A small LLM request (its claim is the core's mem-fraction share of each GPU)."""
    params = [] if tp == 1 else ["--tp-size", str(tp)]
    return {
        "request_id": rid,
        "model": {
            "id": abs(hash(rid)) % 10_000,
            "name": "qwen2.5-7b",
            "backend": "SGLang",
            "backend_parameters": params,
            "categories": ["llm"],
            "cluster_id": 1,
            "hf_config": {
                "architectures": ["Qwen2ForCausalLM"],
                "num_attention_heads": 28,
                "num_key_value_heads": 4,
                "hidden_size": 3584,
                "num_hidden_layers": 28,
                "vocab_size": 152064,
                "max_position_embeddings": 32768,
            },
            "weight_bytes": 15_231_233_024,
            **model_fields,
        },
    }


@dataclass
class Deployment:
    """One test's deployment: settings, an in-process client, and worker processes."""

    url: str
    logs: Path
    overrides: dict[str, Any] = field(default_factory=dict)
    workers: list[WorkerProcess] = field(default_factory=list)
    client: ServiceClient = field(init=False)

    def __post_init__(self) -> None:
        self.settings = Settings(redis_url=self.url, **{**FAST, **self.overrides})
        self.keys = Keys(self.settings.cluster)
        self.client = ServiceClient(self.settings)
        self.redis = self.client.rt.client

    @property
    def env(self) -> dict[str, str]:
        """``GPUSCHED_*`` for worker processes."""
        values = {**FAST, **self.overrides, "redis_url": self.url}
        return {f"GPUSCHED_{k.upper()}": _env_value(v) for k, v in values.items()}

    def start_workers(
        self, count: int, *, ready: bool = True, plain: bool = False, env: dict[str, str] | None = None
    ) -> list[WorkerProcess]:
        """Start ``count`` worker processes (prefork, one pool process each).

        ``plain``: a bare ``celery -A tasks.app worker`` (no ``--queues``);
        ``env``: extra environment variables for these workers.
        """
        started = [
            WorkerProcess(
                {**self.env, **(env or {})},
                f"w{len(self.workers) + i}",
                self.logs / f"worker-{len(self.workers) + i}.log",
                loglevel="INFO",
                queues=() if plain else None,
            ).start()
            for i in range(count)
        ]
        self.workers.extend(started)
        if ready:
            for worker in started:
                worker.wait_ready(90)
        return started

    def stop(self) -> None:
        """Stop every worker and close the client."""
        for worker in self.workers:  # signal all first: they shut down in parallel
            worker.kill(signal.SIGTERM)
        for worker in self.workers:
            worker.stop()
        self.client.close()

    # ----------------------------------------------------------------- reads
    def results(self) -> list[dict[str, str]]:
        """Every results-stream entry."""
        return [fields for _, fields in iter_stream(self.redis, self.keys.results)]

    def events(self, event_type: str | None = None) -> list[dict[str, Any]]:
        """Audit events (fields, ``data`` parsed)."""
        return [
            {**fields, "data": json.loads(fields["data"])}
            for _, fields in iter_stream(self.redis, self.keys.events)
            if event_type is None or fields["type"] == event_type
        ]

    def pending(self) -> dict[str, Any]:
        """The work left: messages per queue (non-empty ones), unacknowledged and delayed
        (outbox) counts, retry timers."""
        queued = {q: int(self.redis.llen(q)) for q in self.keys.queues}
        timers = [str(m) for m in self.redis.zrange(self.keys.timers, 0, -1)]
        return {
            "queued": {q: n for q, n in queued.items() if n},
            "unacked": int(self.redis.hlen(self.keys.unacked)),
            "outbox": int(self.redis.zcard(self.keys.outbox)),
            "retries": [m for m in timers if m.startswith("retry:")],
        }

    def idle(self) -> bool:
        """No queued, unacknowledged, delayed or retry-pending work left."""
        return not any(self.pending().values())

    def outcomes(self) -> dict[str, Counter[str]]:
        """Per request: how many results of each kind (``terminal`` vs ``notice``) it got."""
        counts: dict[str, Counter[str]] = defaultdict(Counter)
        for fields in self.results():
            kind = "terminal" if fields["terminal"] == "1" else "notice"
            counts[fields["request_id"]][kind] += 1
            counts[fields["request_id"]][fields["status"]] += 1
        return counts

    def settled(self, request_ids: set[str]) -> bool:
        """Every request has an outcome and the pipeline is idle (checked twice, 0.5 s apart)."""
        if not request_ids <= set(self.outcomes()) or not self.idle():
            return False
        time.sleep(0.5)
        return self.idle() and request_ids <= set(self.outcomes())

    def assert_ledger_consistent(self) -> None:
        """Invariant 3, the ledger equals the claims of the instances it lists, and every
        published placement is exactly what the ledger books for its request."""
        capacity, booked = self.client.rt.cluster.ledger()
        assert overbooked(capacity, booked) == {}
        totals: Counter[str] = Counter()
        for claims in self.client.rt.cluster.claims().values():
            totals.update(claims)
        assert {k: v for k, v in totals.items() if v} == booked
        assert booking_violations(self.client.rt) == []


#: Prefix of the keys :func:`fill_to_maxmemory` writes (deleted by :func:`free_filler`).
FILLER = "test:filler:"


def fill_to_maxmemory(client: Any, headroom: int) -> int:
    """Cap Redis at its current use + ``headroom`` bytes and fill it until writes are refused.

    Values shrink as the server nears the cap (Redis 7 counts a command's own
    arguments against ``maxmemory``), so at the end even a 16-byte write is
    refused: every write of the service fails with ``OOM`` until
    :func:`free_filler`. Returns how many filler keys were written.
    """
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", used + headroom)
    client.config_set("maxmemory-policy", "noeviction")
    written = 0
    for size in (65_536, 4096, 256, 16):
        refused = 0
        while refused < 3:  # a write may slip through as memory fluctuates: insist a little
            try:
                client.set(f"{FILLER}{written}", "x" * size)
                written += 1
            except redis_errors.OutOfMemoryError:
                refused += 1
    return written


def free_filler(client: Any) -> None:
    """Delete the filler keys (``DEL`` is allowed out of memory): writes are accepted again."""
    keys = list(client.scan_iter(match=f"{FILLER}*", count=1000))
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])
