"""Crashes: SIGKILLed pool processes and workers, a restarted Redis (AOF), a poison message."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from service.support import Deployment, cluster, llm_request, wait_until

from tasks.decision.replay import replay
from tasks.edges.localrun import WorkerProcess, start_redis

pytestmark = [pytest.mark.service, pytest.mark.slow]

#: Big enough that one decision takes tens of milliseconds: SIGKILL lands mid-decision.
SLOW_CLUSTER = (2000, 8)


def _in_flight(d: Deployment) -> list[str]:
    """Task ids whose current delivery has started and not finished."""
    prefix = d.keys.delivery("")
    return [str(key)[len(prefix) :] for key in d.redis.scan_iter(match=f"{prefix}*")]


def _deliveries(d: Deployment) -> set[int]:
    """Start counts of the messages in flight."""
    return {int(d.redis.scard(d.keys.delivery(task_id))) for task_id in _in_flight(d)}


def _kill_pool(worker: WorkerProcess) -> int:
    """SIGKILL the worker's pool processes; returns how many were signalled."""
    killed = 0
    for pid in worker.pool_pids():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        killed += 1
    return killed


def _claimed(d: Deployment, request_id: str) -> bool:
    """The request's attempt is being decided by a message now in flight (its decider)."""
    state, decider = d.redis.hmget(d.keys.request(request_id), "state", "decider")
    return state == "deciding" and decider in _in_flight(d)


def _lost_pool_processes(d: Deployment) -> int:
    return sum(path.read_text(errors="replace").count("SIGKILL") for path in d.logs.glob("worker-*.log"))


#: Pool kills plus the whole-worker kill below: the most deliveries of one message that can
#: die in the SIGKILL test. Redis errors and requeues never count (the guard clears them),
#: so this bound, not a loose one, must leave the dead-letter stream empty.
KILLS = 5 + 1


def test_sigkill_mid_decision_loses_no_request(deployment: Callable[..., Deployment]) -> None:
    d = deployment(max_crashes=KILLS)
    d.client.apply_cluster(cluster(*SLOW_CLUSTER))
    workers = d.start_workers(3)
    ids = [f"k-{n:02d}" for n in range(24)]
    for rid in ids:
        d.client.submit(llm_request(rid, tp=4))
    for _ in range(KILLS - 1):  # kill whatever pool process is deciding, five times
        wait_until(lambda: _in_flight(d), 120, "a decision in flight", interval=0.005)
        for worker in workers:
            _kill_pool(worker)
        time.sleep(0.5)
    wait_until(lambda: _in_flight(d), 120, "a decision in flight", interval=0.005)
    workers[0].kill(signal.SIGKILL)  # a whole worker: its message comes back after the visibility timeout
    d.start_workers(1)

    wait_until(lambda: d.settled(set(ids)), 240, "every request to finish")
    assert _lost_pool_processes(d) >= 1
    outcomes = d.outcomes()
    assert all(outcomes[rid] == {"terminal": 1, "scheduled": 1} for rid in ids), outcomes
    booked = sorted(meta.request_id or "" for meta in d.client.rt.cluster.instance_meta().values())
    assert booked == ids
    d.assert_ledger_consistent()
    assert d.redis.xlen(d.keys.deadletter) == 0
    assert replay(d.redis, d.client.rt.cluster).differ == 0


def test_a_message_that_keeps_killing_workers_is_dead_lettered(
    deployment: Callable[..., Deployment],
) -> None:
    d = deployment(max_crashes=2)
    d.client.apply_cluster(cluster(*SLOW_CLUSTER))
    (worker,) = d.start_workers(1)
    d.client.submit(llm_request("poison", tp=4))
    for crash in (1, 2):  # the delivery counter says which start of the message is running; it
        # is killed once it claimed the attempt (the decider), the proof it drives the request
        wait_until(lambda n=crash: n in _deliveries(d) and _claimed(d, "poison"), 120, f"delivery {crash}",
                   interval=0.002)
        assert _kill_pool(worker) == 1
    result = d.client.wait("poison", timeout=120, terminal=True)
    assert result["status"] == "rejected" and result["error"]["code"] == "dead_lettered"
    (entry,) = d.redis.xrange(d.keys.deadletter)
    fields = entry[1]
    assert (fields["request_id"], fields["task"], fields["reason"]) == (
        "poison",
        "gpusched.decide",
        "worker_lost_repeatedly",
    )
    assert d.outcomes()["poison"] == {"terminal": 1, "rejected": 1}
    assert d.client.rt.cluster.instance_meta() == {}
    assert d.events("sched.request.dead_lettered")


def test_redis_restart_with_aof_loses_no_accepted_request(tmp_path: Path) -> None:
    from service.conftest import require_redis_server

    require_redis_server()
    server = start_redis(appendonly=True, directory=tmp_path / "aof")
    d = Deployment(server.url, tmp_path)
    try:
        d.client.apply_cluster(cluster(100, 8))
        d.start_workers(2)
        accepted: list[str] = []
        done = threading.Event()

        def submitter() -> None:
            for n in range(120):
                rid = f"a-{n:03d}"
                while True:
                    try:
                        d.client.submit(llm_request(rid, tp=4))
                    except Exception:  # Redis is down: the request is not accepted yet
                        time.sleep(0.1)
                        continue
                    accepted.append(rid)
                    break
            done.set()

        thread = threading.Thread(target=submitter, daemon=True)
        thread.start()
        wait_until(lambda: len(accepted) >= 40, 60, "40 accepted requests")
        server.stop(signal.SIGKILL)
        time.sleep(1.0)
        server.start()
        wait_until(done.is_set, 180, "all submissions")
        wait_until(lambda: d.settled(set(accepted)), 240, "every accepted request to finish")
        outcomes = d.outcomes()
        assert len(accepted) == 120
        assert all(outcomes[rid]["terminal"] == 1 and outcomes[rid]["scheduled"] == 1 for rid in accepted)
        d.assert_ledger_consistent()
        assert replay(d.redis, d.client.rt.cluster).differ == 0
    finally:
        d.stop()
        server.stop()
