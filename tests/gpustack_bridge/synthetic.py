"""Synthetic GPUStack workers: real clients of GPUStack's worker API, without GPUs.

Each :class:`SyntheticWorker` registers through ``POST /v2/workers`` with the cluster's
registration token (idempotent on its ``worker_uuid``), serves ``/healthz`` on its own port
on 127.0.0.1 (GPUStack's WorkerSyncer probes it), and posts its status (with
``state_message: null``, without which GPUStack keeps a worker ``not_ready``) and heartbeats
with its own token. :class:`Fleet` runs them and a stand-in for each worker's serve manager:
an instance ``scheduled`` or ``unreachable`` on a live worker is moved to ``running`` with that
worker's token, as the real worker's serve manager does whenever the engine it runs is healthy
and the instance is not ``running`` (``ServeManager._sync_model_instances_state``). Each worker
reports from its own thread, as each real worker is its own process: on a loaded server one
slow round of twenty workers' posts must not starve the others past the heartbeat grace.

``stop_heartbeats`` makes a worker go silent (heartbeats, status and ``/healthz`` stop), as
a crashed host does; ``resume`` brings it back.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.gpustack_bridge.http import HttpError, call

GIB = 1 << 30
H100 = 85_520_809_984  # NVIDIA H100 80GB HBM3, as nvidia-smi reports it (tests/parity/catalog.py)
L40S = 48_305_799_168
RTX_4090 = 25_757_220_864
#: Seconds between a synthetic worker's heartbeats (GPUStack's own worker: 30 s; the tests'
#: server declares a worker lost after HEARTBEAT_GRACE_S).
HEARTBEAT_S = 2.0


@dataclass(frozen=True)
class GpuSpec:
    name: str
    total: int
    vendor: str = "nvidia"
    type: str = "cuda"


H100_SPEC = GpuSpec("NVIDIA H100 80GB HBM3", H100)
L40S_SPEC = GpuSpec("NVIDIA L40S", L40S)
RTX_4090_SPEC = GpuSpec("NVIDIA GeForce RTX 4090", RTX_4090)


def gpu_device(spec: GpuSpec, index: int) -> dict[str, Any]:
    return {
        "vendor": spec.vendor,
        "type": spec.type,
        "index": index,
        "device_index": index,
        "device_chip_index": 0,
        "name": spec.name,
        "uuid": f"GPU-{uuid.uuid4()}",
        "driver_version": "570.86",
        "runtime_version": "12.8",
        "compute_capability": "9.0",
        "core": {"total": 132, "utilization_rate": 0.0},
        "memory": {"total": spec.total, "used": 0, "utilization_rate": 0.0, "is_unified_memory": False},
        "temperature": 35.0,
    }


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 404)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class SyntheticWorker:
    """One worker: registration, ``/healthz``, status and heartbeats."""

    server_url: str
    registration_token: str
    name: str
    gpus: list[GpuSpec]
    labels: dict[str, str] = field(default_factory=dict)
    worker_uuid: str = field(default_factory=lambda: str(uuid.uuid4()))
    id: int = 0
    token: str = ""
    alive: bool = True
    _health: ThreadingHTTPServer | None = None
    _devices: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._devices = [gpu_device(spec, i) for i, spec in enumerate(self.gpus)]

    @property
    def port(self) -> int:
        assert self._health is not None
        return int(self._health.server_address[1])

    def serve_health(self) -> None:
        self._health = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
        threading.Thread(target=self._health.serve_forever, daemon=True).start()

    def stop_health(self) -> None:
        if self._health is not None:
            self._health.shutdown()
            self._health.server_close()
            self._health = None

    def status_body(self) -> dict[str, Any]:
        return {
            "hostname": self.name,
            "ip": "127.0.0.1",
            "ifname": "lo",
            "port": self.port,
            "worker_uuid": self.worker_uuid,
            "system_reserved": {"ram": 0, "vram": 0},
            "state_message": None,
            "status": {
                "cpu": {"total": 64, "utilization_rate": 1.0},
                "memory": {
                    "total": 512 * GIB,
                    "used": 8 * GIB,
                    "utilization_rate": 1.5,
                    "is_unified_memory": False,
                },
                "swap": {"total": 0, "used": 0, "utilization_rate": 0.0},
                "filesystem": [],
                "os": {"name": "Debian", "version": "12"},
                "kernel": {
                    "name": "Linux",
                    "release": "6.1.0",
                    "version": "#1 SMP",
                    "architecture": "x86_64",
                },
                "uptime": {"uptime": 1000.0, "boot_time": "2026-12-01 00:00:00"},
                "gpu_devices": self._devices,
            },
        }

    def register(self) -> None:
        if self._health is None:
            self.serve_health()
        body = {**self.status_body(), "name": self.name, "labels": self.labels, "worker_version": "v2.2.3"}
        row = call("POST", f"{self.server_url}/v2/workers", body, token=self.registration_token)
        self.id, self.token = int(row["id"]), str(row["token"])

    def report(self) -> None:
        """One status post and one heartbeat (while alive)."""
        if not self.alive:
            return
        call("POST", f"{self.server_url}/v2/worker-status", self.status_body(), token=self.token)
        call("POST", f"{self.server_url}/v2/worker-heartbeat", {}, token=self.token)

    def stop_heartbeats(self) -> None:
        self.alive = False
        self.stop_health()

    def resume(self) -> None:
        self.serve_health()
        self.alive = True


@dataclass
class Fleet:
    """Synthetic workers of one cluster, their reporting thread and a stand-in serve manager."""

    server_url: str
    registration_token: str
    admin: tuple[str, str]
    workers: list[SyntheticWorker] = field(default_factory=list)
    serve: bool = True
    started: list[int] = field(default_factory=list)  # instance ids moved to running, in order
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def add(self, name: str, gpus: list[GpuSpec], labels: dict[str, str] | None = None) -> SyntheticWorker:
        worker = SyntheticWorker(self.server_url, self.registration_token, name, gpus, dict(labels or {}))
        worker.register()
        worker.report()
        self.workers.append(worker)
        if self._threads:  # the fleet is running: this worker reports from now on too
            self._spawn(self._report_loop, worker)
        return worker

    def starts(self, instance_ids: list[int], timeout: float = 10) -> Counter[int]:
        """How many times the serve loop moved each instance to running, once it has recorded
        every one of ``instance_ids``: the server sees an instance running as soon as its PUT
        answers, a moment before the loop's thread records that it sent it."""
        deadline = time.monotonic() + timeout
        while not set(instance_ids) <= set(self.started) and time.monotonic() < deadline:
            time.sleep(0.05)
        return Counter(self.started)

    def by_name(self, name: str) -> SyntheticWorker:
        return next(w for w in self.workers if w.name == name)

    def start(self) -> Fleet:
        for worker in self.workers:
            self._spawn(self._report_loop, worker)
        self._spawn(self._serve_loop)
        return self

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)
        for worker in self.workers:
            worker.stop_health()

    def _report_loop(self, worker: SyntheticWorker) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                worker.report()
            except (OSError, HttpError) as error:  # the server restarting: try again next round
                self.errors.append(f"report {worker.name}: {error}")

    def _serve_loop(self) -> None:
        while not self._stop.wait(0.3):
            if not self.serve:
                continue
            try:
                self.serve_once()
            except (OSError, HttpError) as error:
                self.errors.append(f"serve: {error}")

    def serve_once(self) -> None:
        """Move every ``scheduled`` or ``unreachable`` instance of a live worker to ``running``
        (its serve manager's job: the engine it started is healthy)."""
        by_id = {w.id: w for w in self.workers if w.alive}
        rows = call("GET", f"{self.server_url}/v2/model-instances?page=1&perPage=1000", basic=self.admin)
        for row in rows["items"]:
            worker = by_id.get(row.get("worker_id"))
            if row.get("state") not in ("scheduled", "unreachable") or worker is None:
                continue
            body = {key: row[key] for key in ("source", "name", "model_name") if key in row}
            body.update({key: row[key] for key in ("local_path", "huggingface_repo_id") if row.get(key)})
            body.update(
                {
                    "state": "running",
                    "state_message": "",
                    "port": 40000 + int(row["id"]),
                    "ports": [40000 + int(row["id"])],
                    "pid": 100000 + int(row["id"]),
                }
            )
            call("PUT", f"{self.server_url}/v2/model-instances/{row['id']}", body, token=worker.token)
            self.started.append(int(row["id"]))
