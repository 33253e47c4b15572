"""Replay of a log the real service wrote (real redis-server, real workers): in pages and in
several forked processes, the same report as one process reading the log whole."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from service.support import Deployment, cluster, llm_request

import tasks.decision.replay as replay_module
from tasks.decision.replay import replay


def _rounds(d: Deployment, rounds: int, size: int) -> None:
    """Place ``size`` requests in batches, then cancel them (bookings and releases logged)."""
    for n in range(rounds):
        requests = [llm_request(f"r{n}-{i}", tp=1 + i % 2) for i in range(size)]
        d.client.submit_many(requests)
        for request in requests:
            assert d.client.wait(request["request_id"], timeout=60)["status"] == "scheduled"
        for request in requests:
            d.client.cancel(request["request_id"])


def test_a_service_log_replays_the_same_in_pages_and_processes(
    deployment: Callable[..., Deployment], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = deployment()
    d.start_workers(2)
    d.client.apply_cluster(cluster(6, 2))
    _rounds(d, 3, 6)
    whole = replay(d.redis, d.client.rt.cluster, processes=1)
    assert whole.replayed == whole.identical == 18 and not whole.skipped and not whole.differences
    monkeypatch.setattr(replay_module, "PAGE", 5)  # pages end between decisions and their changes
    for processes in (1, 2, 3):
        paged = replay(d.redis, d.client.rt.cluster, processes=processes)
        assert (paged.replayed, paged.identical, paged.differences, paged.skipped) == (18, 18, [], [])
    # the forked processes left this process's connections to Redis working
    assert d.redis.xlen(d.keys.events) > 18 * 4
