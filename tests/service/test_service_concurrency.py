"""8 worker processes × 500 requests on a cluster too small for all of them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from service.support import Deployment, cluster, llm_request, wait_until

from tasks.decision.replay import replay

pytestmark = [pytest.mark.service, pytest.mark.slow]

WORKERS = 8
GPUS = 48  # 24 hosts × 2 GPUs; an LLM claims most of a GPU, so at most 48 placements


def _requests() -> tuple[list[dict[str, object]], set[str]]:
    """500 submissions: 440 one-GPU, 40 tp-2, 10 invalid, and 10 resubmitted ids."""
    batch: list[dict[str, object]] = [llm_request(f"c-{n:04d}") for n in range(440)]
    batch += [llm_request(f"t-{n:04d}", tp=2) for n in range(40)]
    batch += [{"request_id": f"bad-{n}", "model": {"name": "x", "replicas": -1}} for n in range(10)]
    batch += [llm_request(f"c-{n:04d}") for n in range(10)]
    unique = {str(item["request_id"]) for item in batch}
    return batch, unique


@pytest.mark.parametrize("decide_lock", [False, True], ids=["optimistic", "decide-lease"])
def test_concurrent_workers_never_overbook_and_finish_every_request_once(
    deployment: Callable[..., Deployment],
    decide_lock: bool,
) -> None:
    d = deployment(decide_lock=decide_lock)
    d.client.apply_cluster(cluster(24, 2))
    d.start_workers(WORKERS)
    batch, unique = _requests()
    statuses = [d.client.submit(item).status for item in batch]  # type: ignore[union-attr]
    assert statuses.count("accepted") == 480 and statuses.count("rejected") == 10
    assert statuses.count("duplicate") == 10

    wait_until(lambda: d.settled(unique), 300, "all 490 requests to settle")

    outcomes = d.outcomes()
    assert set(outcomes) == unique
    parked = set(d.client.rt.parked.entries())
    for request_id, counts in outcomes.items():
        assert counts["terminal"] <= 1 and counts["notice"] <= 1, (request_id, counts)
        if counts["terminal"] == 0:  # still waiting for capacity: announced once, parked
            assert counts["notice"] == 1 and request_id in parked, (request_id, counts)
        else:
            assert request_id not in parked
    scheduled = {rid for rid, counts in outcomes.items() if counts["scheduled"]}
    assert 0 < len(scheduled) <= GPUS
    assert sum(1 for counts in outcomes.values() if counts["rejected"]) == 10
    booked = {meta.request_id for meta in d.client.rt.cluster.instance_meta().values()}
    assert booked == scheduled
    d.assert_ledger_consistent()
    assert d.redis.xlen(d.keys.deadletter) == 0
    if not decide_lock:
        assert d.events("sched.reservation.conflicted")  # the deciders really raced

    report = replay(d.redis, d.client.rt.cluster)
    assert report.replayed == len(d.events("sched.decision.made"))
    assert (report.identical, report.differ, report.skipped) == (report.replayed, 0, [])
