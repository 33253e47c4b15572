"""Freed GPUs wake the parked requests they can hold, no more, and lose no wake-up."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from service.support import Deployment, cluster, llm_request, wait_until

from tasks.audit.replay import replay

pytestmark = pytest.mark.service

WAITERS = 12


def _scheduled(d: Deployment) -> set[str]:
    return {rid for rid, counts in d.outcomes().items() if counts["scheduled"]}


def test_a_release_wakes_only_the_waiters_its_gpus_hold(deployment: Callable[..., Deployment]) -> None:
    d = deployment(wake_recheck_s=0.5)
    d.client.apply_cluster(cluster(2, 2))  # 4 RTX 4090s; each request takes most of one GPU
    d.start_workers(2)
    fills = [f"fill-{n}" for n in range(4)]
    for rid in fills:
        assert d.client.submit(llm_request(rid), wait=True, timeout=60)["status"] == "scheduled"  # type: ignore[index]
    waiters = [f"wait-{n:02d}" for n in range(WAITERS)]
    for rid in waiters:
        d.client.submit(llm_request(rid))
    wait_until(lambda: len(d.client.rt.parked.entries()) == WAITERS and d.idle(), 120, "the waiters to park")

    d.client.cluster_event({"kind": "instance_deleted", "request_id": "fill-0"})
    wait_until(lambda: len(_scheduled(d)) == 5 and d.idle(), 120, "one waiter to take the freed GPU")
    wait_until(lambda: d.redis.zcard(d.keys.followups) == 0, 60, "the follow-up's last check")
    woken = d.events("sched.request.woken")
    assert len(woken) == 1, [e["request_id"] for e in woken]  # before: every waiter, 12 times

    for rid in fills[1:]:  # every freed GPU still reaches a waiter: nothing is lost
        d.client.cluster_event({"kind": "instance_deleted", "request_id": rid})
    wait_until(lambda: len(_scheduled(d)) == 8 and d.idle(), 120, "three more waiters to be placed")
    wait_until(lambda: d.redis.zcard(d.keys.followups) == 0, 60, "the follow-ups' last checks")
    assert len(d.client.rt.parked.entries()) == WAITERS - 4
    assert len(d.events("sched.request.woken")) <= 4 + 3  # a check may run while a waiter decides
    d.assert_ledger_consistent()
    report = replay(d.redis, d.client.rt.cluster)
    assert (report.identical, report.differ, report.skipped) == (report.replayed, 0, [])
