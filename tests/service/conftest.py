"""Service-test fixtures: a real ``redis-server`` and real Celery worker processes.

Skips when ``redis-server`` is not installed, except in CI (``CI`` set), where
that is a failure (``.ci/run`` installs it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from service.support import Deployment

from tasks.edges.local_failover import sentinel_command
from tasks.edges.localrun import RedisServer, redis_binary, start_redis


def require_redis_server() -> None:
    """Skip locally, fail in CI, when ``redis-server`` is missing."""
    if redis_binary() is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is required in CI (.ci/run installs it)")
        pytest.skip("redis-server is not installed")


def require_sentinel() -> None:
    """Skip locally, fail in CI, without a Sentinel binary."""
    require_redis_server()
    if sentinel_command() is None:
        if os.environ.get("CI"):
            pytest.fail("redis-sentinel is required in CI (.ci/run installs it)")
        pytest.skip("redis-sentinel is not installed")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One private redis-server (no persistence) for the session."""
    require_redis_server()
    server = start_redis(directory=tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture
def deployment(redis_server: RedisServer, tmp_path: Path) -> Iterator[Callable[..., Deployment]]:
    """A factory of deployments on a fresh database; the test starts the workers."""
    created: list[Deployment] = []

    def make(**overrides: object) -> Deployment:
        made = Deployment(redis_server.url, tmp_path, dict(overrides))
        made.redis.flushdb()
        created.append(made)
        return made

    yield make
    for made in created:
        made.stop()
