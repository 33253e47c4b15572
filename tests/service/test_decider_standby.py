"""``decider_standby``: of two real worker nodes one decides, the other stands by and takes over
when the first is SIGKILLed or shut down (real redis-server, real Celery workers, real signals).

Who decided is read from the audit log: every ``sched.decision.made`` event names its writer
(``source``: ``<host>:<pid>`` of the pool process that decided). Without the setting, the
same two nodes both decide (the control: the check tells the two apart).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import pytest
from service.support import Deployment, cluster, llm_request, wait_until, worker_row

from tasks.edges.localrun import WorkerProcess

pytestmark = pytest.mark.service

#: The default presence TTL: a takeover is seconds away, and a renewal thread starved for a
#: second on a loaded machine does not hand the presence over in the middle of a phase.
TTL_S = 3.0


def _submit(d: Deployment, prefix: str, count: int) -> set[str]:
    ids = {f"{prefix}-{n:03d}" for n in range(count)}
    for rid in sorted(ids):
        assert d.client.submit(llm_request(rid)).status == "accepted"
    wait_until(lambda: d.settled(ids), 120, f"the {prefix} requests to settle")
    return ids


def _deciders(d: Deployment, ids: set[str]) -> set[int]:
    """Pids of the processes that decided ``ids``."""
    return {
        int(event["source"].rsplit(":", 1)[1])
        for event in d.events("sched.decision.made")
        if event["request_id"] in ids
    }


def _holder(d: Deployment, nodes: list[WorkerProcess]) -> WorkerProcess:
    """The node whose id the presence holds (``<host>:<main pid>:<random>``)."""
    value = str(d.redis.get(d.keys.decider) or "")
    found = [node for node in nodes if f":{node.pid}:" in value]
    assert len(found) == 1, value
    return found[0]


def test_without_standby_both_nodes_decide(deployment: Callable[..., Deployment]) -> None:
    d = deployment()
    d.client.apply_cluster(cluster(40, 2))
    d.start_workers(2)
    ids = _submit(d, "both", 40)
    assert len(_deciders(d, ids)) == 2
    assert d.redis.get(d.keys.decider) is None


def test_one_node_decides_the_other_takes_over_when_it_is_killed_or_stopped(
    deployment: Callable[..., Deployment],
) -> None:
    d = deployment(decider_standby=True, decider_presence_ttl_s=TTL_S)
    d.client.apply_cluster(cluster(40, 2))
    nodes = d.start_workers(2)

    first = _submit(d, "first", 40)
    active = _holder(d, nodes)
    standby = next(node for node in nodes if node is not active)
    assert _deciders(d, first) == set(active.pool_pids())
    # the cluster queue is still served (by either node)
    assert d.client.cluster_event({"kind": "worker_added", "worker": worker_row(41, 2)})["status"] == "queued"
    wait_until(lambda: d.events("sched.worker.upserted"), 30, "a node to apply the cluster event")

    for pid in active.pool_pids():  # SIGKILL: no hand-back, the presence lapses after its TTL
        os.kill(pid, signal.SIGKILL)
    active.kill(signal.SIGKILL)
    second = _submit(d, "second", 20)
    assert _deciders(d, second) == set(standby.pool_pids())
    assert _holder(d, nodes) is standby

    replacement = d.start_workers(1)[0]  # a new node finds the presence taken: it stands by
    third = _submit(d, "third", 10)
    assert _deciders(d, third) == set(standby.pool_pids())

    standby.stop()  # warm shutdown: the presence is handed back, the new node takes over
    fourth = _submit(d, "fourth", 10)
    assert _deciders(d, fourth) == set(replacement.pool_pids())
    assert _holder(d, [replacement]) is replacement
    d.assert_ledger_consistent()
    assert d.redis.xlen(d.keys.deadletter) == 0
