"""Fixtures of the bridge tests: GPUStack's own server (one with its scheduler, one with the
gpusched plugin switching it off, started together once per session), a redis-server, and a
:class:`~tests.gpustack_bridge.scenario.World` per test; ``failover_world`` puts the world's
gpusched on a Redis that fails over (a master, a replica and three Sentinels of its own,
:func:`service.failover_run.start_sentinels`).

Skips locally when a prerequisite is missing (PostgreSQL, the GPUStack virtualenv built by
``tools/gpustack-server/setup.sh``, redis-server, redis-sentinel for ``failover_world``); with
``CI`` set that is a failure.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from service.conftest import require_sentinel
from service.failover_run import sentinel_settings, start_sentinels, stop_sentinels
from service.support import Deployment

from tasks.edges.local_failover import ReplicatedRedis
from tasks.edges.localrun import RedisServer, start_redis
from tests.gpustack_bridge.scenario import World
from tests.gpustack_bridge.server import GpustackServer, Postgres, prerequisites


def _require() -> None:
    missing = prerequisites()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{missing}: required in CI (.ci/run installs it)")
        pytest.skip(missing)


class Servers:
    """The two GPUStack servers of the session, started in parallel on first use."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: dict[bool, GpustackServer] = {}
        self.postgres: list[Postgres] = []

    def start(self) -> None:
        servers = {}
        for external in (False, True):
            name = "place" if external else "stock"
            # PostgreSQL runs as user postgres: its folder must not sit under a root-only one
            # (pytest's tmp_path is), so it gets a fresh folder of its own in the system's temp dir
            pg = Postgres(Path(tempfile.mkdtemp(prefix=f"gpusched-pg-{name}-"))).start()
            self.postgres.append(pg)
            servers[external] = GpustackServer(pg.url, self.root / f"gpustack-{name}", external)
        errors: list[BaseException] = []

        def boot(server: GpustackServer) -> None:
            try:
                server.start()
            except BaseException as error:  # reported below, on the test's thread
                errors.append(error)

        threads = [threading.Thread(target=boot, args=(s,)) for s in servers.values()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.started = servers
        if errors:
            raise errors[0]

    def stop(self) -> None:
        for server in self.started.values():
            server.stop()
        for pg in self.postgres:
            pg.stop()
            shutil.rmtree(pg.directory, ignore_errors=True)


@pytest.fixture(scope="session")
def gpustack_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    _require()
    servers = Servers(tmp_path_factory.mktemp("gpustack"))
    try:
        servers.start()
        yield servers
    finally:
        servers.stop()


@pytest.fixture(scope="session")
def bridge_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    _require()
    server = start_redis(directory=tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def models_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture
def world(
    gpustack_servers: Servers, bridge_redis: RedisServer, models_root: Path, tmp_path: Path
) -> Iterator[Callable[..., World]]:
    """``world(mode, **gpusched_settings)``: a fresh GPUStack cluster and gpusched partition (on the
    session's redis-server unless the settings name another ``redis_url``)."""
    made: list[World] = []

    def make(mode: str, workers: int = 1, **overrides: object) -> World:
        url = str(overrides.pop("redis_url", bridge_redis.url))
        deployment = Deployment(url, tmp_path, {"model_roots": [str(models_root)], **overrides})
        deployment.redis.flushdb()
        server = gpustack_servers.started[mode == "place"]
        created = World(server, deployment, models_root, tmp_path, mode)
        made.append(created)
        if workers:
            deployment.start_workers(workers)
        return created

    yield make
    for item in made:
        item.stop()
        item.deployment.stop()


@pytest.fixture
def replicated_redis(tmp_path: Path) -> Iterator[ReplicatedRedis]:
    """A master, a replica and three Sentinels of this test's own (the test may kill the master)."""
    _require()
    require_sentinel()
    replicated = start_sentinels(tmp_path / "redis")
    yield replicated
    stop_sentinels(replicated)


@pytest.fixture
def failover_world(replicated_redis: ReplicatedRedis, world: Callable[..., World]) -> Callable[..., World]:
    """``failover_world(mode, **gpusched_settings)``: :func:`world`, every gpusched process (the
    bridge, the workers, the test's client) finding its master through ``replicated_redis``'s
    Sentinels. Requested after ``replicated_redis``, the world stops before the Redis does."""

    def make(mode: str, workers: int = 1, **overrides: object) -> World:
        return world(mode, workers, **{**sentinel_settings(replicated_redis), **overrides})

    return make
