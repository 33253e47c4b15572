"""Health checks: Redis, this node's drainer, the deployment's worker nodes; the first failure says why."""

from __future__ import annotations

import json

import pytest

from tasks.base import liveness
from tasks.base.settings import Settings
from tasks.runtime import health
from tasks.runtime.health import (
    DEPLOYMENT_CHECKS,
    data_generation_ok,
    drainer_alive,
    first_failure,
    redis_reachable,
    run_checks,
    worker_nodes_live,
)
from tasks.state.generation import GenerationMemory
from tasks.testing import Harness, isolated_settings

NOW = 1_800_000_000.0


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(health.time, "time", lambda: NOW)


def _beat(h: Harness, node: str, seen_s: float, drained_s: float | None) -> None:
    value = {"pid": 1, "ready_ms": 0, "seen_ms": int(seen_s * 1000),
             "drained_ms": None if drained_s is None else int(drained_s * 1000)}
    h.rt.client.hset(h.rt.keys.nodes, node, json.dumps(value))


def test_the_deployment_needs_a_live_node_whose_drainer_passes(clock: None) -> None:
    h = Harness(settings=isolated_settings(health_stale_after_s=30))
    nobody = worker_nodes_live(h.rt)
    assert nobody.detail == "no live worker node (0 worker node(s) live, 0 draining, 0 stale)"
    _beat(h, "dead@host", NOW - 31, NOW - 31)  # 31 s > 30 s: stale
    _beat(h, "stuck@host", NOW - 5, NOW - 40)  # beats, but its drainer stopped
    verdict = worker_nodes_live(h.rt)
    assert not verdict.ok and verdict.detail.startswith("no worker node's drainer finished a recent pass")
    _beat(h, "good@host", NOW - 5, NOW - 6)
    expected = health.Check("workers", True, "2 worker node(s) live, 1 draining, 1 stale")
    assert worker_nodes_live(h.rt) == expected
    assert first_failure(run_checks(h.rt, DEPLOYMENT_CHECKS)) is None


def test_this_nodes_drainer_is_alive_while_its_passes_are_recent(
    clock: None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Harness(settings=isolated_settings(health_stale_after_s=30))
    marks: dict[str, float] = {}
    monkeypatch.setattr(liveness, "last_pass", marks.get)
    assert not drainer_alive(h.rt).ok  # never passed, and no boot recorded
    marks[health.BOOTED] = NOW - 10
    assert drainer_alive(h.rt).detail == "starting: no pass finished yet"
    marks[liveness.DRAINER] = NOW - 2
    assert drainer_alive(h.rt).ok
    marks[liveness.DRAINER] = NOW - 45
    assert drainer_alive(h.rt).detail == "the drainer last finished a pass 45 s ago (limit 30 s)"


def test_an_unreachable_redis_is_the_one_reason_given() -> None:
    h = Harness()
    assert redis_reachable(h.rt).ok
    settings = Settings(redis_url="redis://127.0.0.1:1/0", redis_socket_connect_timeout_s=0.5)
    from tasks.state.context import build_runtime, redis_client

    unreachable = redis_client(settings)
    down = build_runtime(settings, lambda *_: None, lambda _: None, client=unreachable, chain=h.rt.chain)
    verdicts = run_checks(down, DEPLOYMENT_CHECKS)
    assert [v.name for v in verdicts] == ["redis"]  # the checks that read Redis are not run
    failed = first_failure(verdicts)
    assert failed is not None and failed.detail.startswith("Redis does not answer (ConnectionError")


def test_the_data_generation_must_be_the_one_the_service_wrote() -> None:
    h = Harness()
    assert data_generation_ok(h.rt).ok
    h.rt.client.flushall()  # Redis restarted without its data
    lost = data_generation_ok(h.rt)
    assert not lost.ok and lost.detail.startswith("Redis lost its data: generation ")
    marker = data_generation_ok(h.rt)  # the detection left the marker: every process now says so
    assert not marker.ok and marker.detail.endswith("not recovered yet")
    fresh = Harness()
    fresh.rt.client.delete(fresh.rt.keys.generation)
    fresh.rt.generation.memory = GenerationMemory()  # a process that never saw it (gpusched health)
    assert data_generation_ok(fresh.rt) == health.Check(
        "data", True, "no data generation yet: no worker node has started")
    _beat(fresh, "n@host", NOW, NOW)  # a node booted, yet no generation: it was wiped since
    empty = data_generation_ok(fresh.rt)
    assert empty == health.Check("data", False, "no data generation: Redis is empty or lost its data "
                                 "(no worker node has checked it since)")


def test_writes_must_not_wait_for_a_replica_longer_than_the_staleness_limit(clock: None) -> None:
    h = Harness(settings=isolated_settings(health_stale_after_s=30, min_replicas_acked=1))
    k = h.rt.keys
    assert health.writes_acknowledged(Harness().rt).detail == "no replica required"
    h.rt.client.xadd(k.results, {"request_id": "old"}, id=f"{int((NOW - 31) * 1000)}-0")
    verdict = health.writes_acknowledged(h.rt)
    assert not verdict.ok and verdict.detail == (
        "writes have waited 31 s for a replica (limit 30 s): readers do not see them yet"
    )
    marked = h.rt.partition.call(h.rt.replication.mark_call())
    assert marked is not None
    h.rt.partition.call(h.rt.replication.advance_call(*marked, 1))
    h.rt.client.xadd(k.results, {"request_id": "recent"}, id=f"{int((NOW - 5) * 1000)}-0")
    expected = health.Check("replication", True, "acknowledged by 1 replica(s)")
    assert health.writes_acknowledged(h.rt) == expected
    marked = h.rt.partition.call(h.rt.replication.mark_call())
    assert marked is not None
    h.rt.partition.call(h.rt.replication.advance_call(*marked, 0))
    assert health.writes_acknowledged(h.rt).detail == "acknowledged by the master alone: no replica attached"
