"""One bridge test's world: a GPUStack cluster with synthetic workers, a gpusched deployment on a
real redis-server with real worker processes, and the bridge as a real ``gpusched gpustack``
process (SIGKILL-able, restartable).

Waits poll with generous deadlines and fail only if the system never converges.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.support import Deployment, wait_until

from tasks.edges.gpustack_bridge.ids import instance_of
from tests.gpustack_bridge.http import call
from tests.gpustack_bridge.models import model_folder
from tests.gpustack_bridge.server import ROOT, GpustackServer
from tests.gpustack_bridge.synthetic import Fleet, GpuSpec

_names = itertools.count(1)


def unique(prefix: str) -> str:
    """Names are unique per GPUStack server (workers, clusters, models): one counter per session."""
    return f"{prefix}-{os.getpid() % 1000}-{next(_names)}"


@dataclass
class BridgeProcess:
    """``python -m tasks.edges.cli gpustack ...`` with its log in a file."""

    args: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> BridgeProcess:
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tasks.edges.cli", "gpustack", *self.args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=ROOT,
        )
        log.close()
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(30)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)

    def exited(self) -> bool:
        return self.process is not None and self.process.poll() is not None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def events(self, name: str) -> list[dict[str, Any]]:
        """The log's JSON lines of event ``name`` (``gpustack.placed``, ...), in order."""
        lines = (line for line in self.log().splitlines() if f'"event": "{name}"' in line)
        return [json.loads(line) for line in lines]


@dataclass
class World:
    server: GpustackServer
    deployment: Deployment
    models_root: Path
    logs: Path
    mode: str
    cluster_id: int = 0
    api_key: str = ""
    fleet: Fleet | None = None
    bridges: list[BridgeProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cluster_id = self.server.create_cluster(unique("c"))
        self.api_key = self.server.api_key(unique("key"))
        token = self.server.registration_token(self.cluster_id)
        self.fleet = Fleet(self.server.url, token, self.server.admin)

    # ------------------------------------------------------------------ processes
    def bridge_env(self) -> dict[str, str]:
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")},
            **self.deployment.env,
            "GPUSCHED_GPUSTACK_API_KEY": self.api_key,
            "GPUSCHED_GPUSTACK_METRICS_PORT": "0",
            "GPUSCHED_LOG_FORMAT": "json",
        }

    def start_bridge(
        self, *, synced: bool = True, server: str | None = None, env: dict[str, str] | None = None
    ) -> BridgeProcess:
        """Start a bridge; with ``synced``, wait until it has listed workers, models and instances.

        ``server``: the URL it reaches GPUStack at (a proxy's; GPUStack's own by default);
        ``env``: more of its environment (``GPUSCHED_*`` settings).
        """
        url = server or self.server.url
        args = ["--server", url, "--cluster-id", str(self.cluster_id), "--mode", self.mode]
        log_path = self.logs / f"bridge-{len(self.bridges)}.log"
        bridge = BridgeProcess(args, {**self.bridge_env(), **(env or {})}, log_path).start()
        self.bridges.append(bridge)
        if synced:
            wait_until(
                lambda: '"gpustack.synced"' in bridge.log() or bridge.exited(), 120, "the bridge synced"
            )
            assert not bridge.exited(), bridge.log()[-2000:]
        return bridge

    def stop(self) -> None:
        for bridge in self.bridges:
            bridge.stop()
        if self.fleet is not None:
            self.fleet.stop()

    # ------------------------------------------------------------------ GPUStack
    def add_workers(self, count: int, gpus: list[GpuSpec], prefix: str = "w") -> list[str]:
        assert self.fleet is not None
        names = []
        for _ in range(count):
            name = unique(prefix)
            self.fleet.add(name, gpus)
            names.append(name)
        return names

    def start_fleet(self, count: int, gpus: list[GpuSpec]) -> list[str]:
        """Add ``count`` workers with ``gpus``, start the fleet's reports, wait until all are ready."""
        names = self.add_workers(count, gpus)
        assert self.fleet is not None
        self.fleet.start()
        self.wait_workers_ready(names)
        return names

    def wait_workers_ready(self, names: list[str], timeout: float = 90) -> None:
        def ready() -> bool:
            rows = {r["name"]: r for r in self.rows("workers")}
            return all(rows.get(n, {}).get("state") == "ready" for n in names)

        wait_until(ready, timeout, f"workers {names} ready in GPUStack", interval=1)

    def create_model(
        self, key: str, replicas: int = 1, params: list[str] | None = None, **extra: Any
    ) -> dict[str, Any]:
        folder = model_folder(self.models_root, key)
        body = {
            "name": unique(key.replace(".", "-")),
            "source": "local_path",
            "local_path": str(folder),
            "backend": "SGLang",
            "replicas": replicas,
            "cluster_id": self.cluster_id,
            "placement_strategy": "spread",
            "backend_parameters": params or [],
            **extra,
        }
        return dict(self.server.admin_call("POST", "/v2/models", body))

    def rows(self, kind: str) -> list[dict[str, Any]]:
        rows = call("GET", f"{self.server.url}/v2/{kind}?page=1&perPage=1000", basic=self.server.admin)[
            "items"
        ]
        return [r for r in rows if r.get("cluster_id") in (None, self.cluster_id)]

    def instances(self, model_id: int | None = None) -> list[dict[str, Any]]:
        return [r for r in self.rows("model-instances") if model_id is None or r["model_id"] == model_id]

    def wait_instances(
        self, predicate: Callable[[list[dict[str, Any]]], bool], what: str, timeout: float = 120
    ) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []

        def check() -> bool:
            nonlocal found
            found = self.instances()
            return predicate(found)

        try:
            wait_until(check, timeout, what, interval=0.5)
        except AssertionError as error:
            states = [
                (r["id"], r["state"], r.get("worker_name"), (r.get("state_message") or "")[:200])
                for r in found
            ]
            raise AssertionError(f"{error}; instances: {states}") from None
        return found

    def decided(self, count: int, timeout: float = 120) -> list[dict[str, Any]]:
        """Wait until ``count`` instances are running or were found unschedulable."""

        def done(row: dict[str, Any]) -> bool:
            return row["state"] == "running" or (row.get("state_message") or "").startswith("No suitable")

        return self.wait_instances(
            lambda rows: sum(map(done, rows)) >= count, f"{count} instances decided", timeout
        )

    def running(self, count: int, timeout: float = 120) -> list[dict[str, Any]]:
        return self.wait_instances(
            lambda rows: sum(r["state"] == "running" for r in rows) >= count,
            f"{count} instances running",
            timeout,
        )


def placements(rows: list[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    """instance name → (worker name, GPU indexes, claims, subordinates' worker names and indexes)."""
    out = {}
    for row in rows:
        claim = row.get("computed_resource_claim") or {}
        subs = ((row.get("distributed_servers") or {}).get("subordinate_workers")) or []
        out[row["name"]] = (
            row.get("worker_name"),
            tuple(row.get("gpu_indexes") or ()),
            tuple(sorted((claim.get("vram") or {}).items())),
            claim.get("vram_utilization"),
            tuple((s.get("worker_name"), tuple(s.get("gpu_indexes") or ())) for s in subs),
        )
    return out


def gpus_over_total(server: GpustackServer, cluster_id: int) -> list[str]:
    """GPUs whose allocated memory exceeds their total, in GPUStack's own view (``memory.allocated``)."""
    rows = call("GET", f"{server.url}/v2/workers?page=1&perPage=1000", basic=server.admin)["items"]
    over = []
    for worker in rows:
        if worker.get("cluster_id") != cluster_id:
            continue
        for gpu in (worker.get("status") or {}).get("gpu_devices") or []:
            memory = gpu.get("memory") or {}
            if (memory.get("allocated") or 0) > (memory.get("total") or 0):
                over.append(f"{worker['name']}:{gpu['type']}:{gpu['index']}")
    return over


def scheduled_results(w: World) -> Counter[str]:
    """Terminal ``scheduled`` results per request of this cluster (a move is its own request)."""
    return Counter(
        f["request_id"]
        for f in w.deployment.results()
        if f["status"] == "scheduled"
        and f["terminal"] == "1"
        and instance_of(f["request_id"], w.cluster_id) is not None
    )


def assert_consistent(w: World, unwritten: Iterable[int] = ()) -> None:
    """gpusched books exactly GPUStack's live instances, once each; nothing over a GPU's total.

    ``unwritten``: instances gpusched booked whose placement GPUStack refused to store (booked,
    not live in GPUStack).
    """
    w.deployment.assert_ledger_consistent()
    live = {r["id"] for r in w.instances() if r.get("worker_id") is not None}
    booked = Counter(
        instance_of(meta.request_id or "", w.cluster_id)
        for meta in w.deployment.client.rt.cluster.instance_meta().values()
    )
    assert set(booked) == live | set(unwritten) and all(n == 1 for n in booked.values()), (booked, live)
    assert max(scheduled_results(w).values(), default=1) == 1
    assert gpus_over_total(w.server, w.cluster_id) == []


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    return wait_until(predicate, timeout, what, interval=0.5)


def settle(seconds: float) -> None:
    time.sleep(seconds)
