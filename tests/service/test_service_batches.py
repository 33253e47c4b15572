"""Batches (``gpusched.decide_batch``): each request decided as it would be alone (real
redis-server, real prefork workers, real SIGKILL)."""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from service.support import Deployment, cluster, llm_request, wait_until

from tasks.decision.replay import replay
from tasks.intake.limits import IntakeLimits
from tasks.intake.requests import normalize
from tasks.runtime.task_contract import DECIDE_BATCH

pytestmark = pytest.mark.service

#: Big enough that the first decision on a fresh worker takes seconds (its mirror reads the
#: whole cluster): a SIGKILL lands after the batch claimed its requests, before it commits.
SLOW_CLUSTER = (2000, 8)


def _mixed_requests(prefix: str) -> list[dict[str, Any]]:
    """tp 1/2/4 requests for a 3 × 8 cluster (39 GPUs for 24: the last ones find no room and
    park), and a tp 8 one, which 28 attention heads refuse (GPUStack's check)."""
    sizes = [1, 2, 4, 4, 1, 8, 2, 4, 4, 2, 1, 4, 4, 2, 4]
    return [llm_request(f"{prefix}-{n:02d}", tp=tp) for n, tp in enumerate(sizes)]


def _published(d: Deployment) -> dict[str, list[str]]:
    """Per request, the result texts on the results stream, in order."""
    texts: dict[str, list[str]] = {}
    for fields in d.results():
        texts.setdefault(fields["request_id"], []).append(fields["result"])
    return texts


def _decisions(d: Deployment) -> dict[str, list[tuple[str, str, str]]]:
    """Per request, its recorded decisions: (cluster version, result digest, outcome)."""
    made: dict[str, list[tuple[str, str, str]]] = {}
    for event in d.events("sched.decision.made"):
        data = event["data"]
        made.setdefault(event["request_id"], []).append(
            (event["cluster_version"], data["result_digest"], data["outcome"]["status"]))
    return made


def _deciders(d: Deployment, ids: list[str]) -> Counter[str]:
    return Counter(str(d.redis.hget(d.keys.request(rid), "decider")) for rid in ids)


def test_a_batch_decides_byte_for_byte_as_single_submits_do(deployment: Callable[..., Deployment]) -> None:
    alone = deployment(cluster="alone")
    batched = deployment(cluster="batched")
    for d in (alone, batched):
        d.client.apply_cluster(cluster(3, 8))
        d.start_workers(1)
    requests = _mixed_requests("r")
    ids = [r["request_id"] for r in requests]
    for request in requests:  # one after the other: the order the batch decides them in
        alone.client.submit(request, wait=True, timeout=60)
    submissions = batched.client.submit_many(requests)
    assert [s.status for s in submissions] == ["accepted"] * len(requests)
    for d in (alone, batched):
        wait_until(lambda d=d: d.settled(set(ids)), 120, "every request decided")

    assert _published(batched) == _published(alone)
    assert _decisions(batched) == _decisions(alone)
    statuses = {status for made in _decisions(alone).values() for _, _, status in made}
    assert statuses == {"scheduled", "unschedulable", "rejected"}
    assert _deciders(batched, ids).most_common(1)[0][1] == len(ids)  # one message decided them all
    assert len(set(_deciders(alone, ids))) == len(ids)
    for d in (alone, batched):
        report = replay(d.redis, d.client.rt.cluster)
        assert (report.replayed, report.differ) == (len(ids), 0)
        d.assert_ledger_consistent()


def test_one_bad_request_in_a_batch_is_rejected_alone(deployment: Callable[..., Deployment]) -> None:
    d = deployment()
    d.client.apply_cluster(cluster(2, 8))
    d.start_workers(1)
    bad = llm_request("b-bad")
    bad["model"]["weight_bytes"] = "lots"  # refused at intake, naming the field
    again = llm_request("b-0")
    again["model"]["name"] = "another-model"  # the id of b-0, another request: a conflict
    submissions = d.client.submit_many([llm_request("b-0"), bad, llm_request("b-1"), llm_request("b-0"),
                                        again])
    assert [s.status for s in submissions] == ["accepted", "rejected", "accepted", "duplicate", "conflict"]
    rejection = submissions[1].result
    assert rejection is not None and rejection["error"]["field"] == "model.weight_bytes"
    wait_until(lambda: d.settled({"b-0", "b-1", "b-bad"}), 60, "the batch decided")
    outcomes = d.outcomes()
    assert outcomes["b-0"] == outcomes["b-1"] == {"terminal": 1, "scheduled": 1}
    assert outcomes["b-bad"] == {"terminal": 1, "rejected": 1}
    assert d.events("sched.request.conflict")

    # items a hostile sender puts in a batch: each refused alone, the rest decided
    normalized = normalize(llm_request("b-2"), IntakeLimits.of(d.settings))
    d.client.rt.records.accept("b-2", normalized.request_json, normalized.digest,
                               outbox_due_ms=d.client.rt.partition.now_ms() + 600_000)
    assert d.client.rt.dispatch_batch is not None
    d.client.rt.dispatch_batch([["not an id!", 0, 0], ["b-2", 0, 0], ["b-2", 0, 0], ["b-1", "0", 0]])
    wait_until(lambda: "b-2" in d.outcomes() and d.redis.xlen(d.keys.deadletter) >= 3, 60, "the batch")
    assert d.outcomes()["b-2"] == {"terminal": 1, "scheduled": 1}
    letters = [fields for _, fields in d.redis.xrange(d.keys.deadletter)]
    assert [(f["task"], f["reason"], f["request_id"]) for f in letters] == [
        (DECIDE_BATCH, "invalid_arguments", "")] * 3
    assert [f["detail"].split(":")[0] for f in letters] == [
        f"{DECIDE_BATCH} item 0", f"{DECIDE_BATCH} item 2", f"{DECIDE_BATCH} item 3"]
    assert d.outcomes()["b-1"] == {"terminal": 1, "scheduled": 1}  # untouched by the bad item


def _in_flight(d: Deployment) -> list[str]:
    prefix = d.keys.delivery("")
    return [str(key)[len(prefix):] for key in d.redis.scan_iter(match=f"{prefix}*")]


def _all_claimed(d: Deployment, ids: list[str], start: int) -> bool:
    """Start ``start`` of the batch message is running and it claimed every request."""
    flying = _in_flight(d)
    if not any(int(d.redis.scard(d.keys.delivery(task))) == start for task in flying):
        return False
    records = [d.redis.hmget(d.keys.request(rid), "state", "decider") for rid in ids]
    return all(state == "deciding" and decider in flying for state, decider in records)


def _kill_pool(d: Deployment) -> None:
    for worker in d.workers:
        for pid in worker.pool_pids():
            os.kill(pid, signal.SIGKILL)


def _slow_batch(d: Deployment, ids: list[str]) -> None:
    """One worker on the slow cluster, and one batch of ``ids`` (tp 1, 2, 4 in turn)."""
    d.client.apply_cluster(cluster(*SLOW_CLUSTER))
    d.start_workers(1)
    d.client.submit_many([llm_request(rid, tp=(1, 2, 4)[n % 3]) for n, rid in enumerate(ids)])


def test_a_worker_killed_mid_batch_decides_each_request_exactly_once(
    deployment: Callable[..., Deployment],
) -> None:
    d = deployment(max_crashes=3)
    ids = [f"k-{n:02d}" for n in range(12)]
    _slow_batch(d, ids)
    wait_until(lambda: _all_claimed(d, ids, 1), 120, "the batch claimed", interval=0.002)
    _kill_pool(d)  # before it committed: the redelivered message decides them all

    wait_until(lambda: d.settled(set(ids)), 240, "every request to finish")
    assert "SIGKILL" in "".join(path.read_text(errors="replace") for path in d.logs.glob("worker-*.log"))
    assert all(d.outcomes()[rid] == {"terminal": 1, "scheduled": 1} for rid in ids), d.outcomes()
    assert {rid: len(made) for rid, made in _decisions(d).items()} == dict.fromkeys(ids, 1)
    report = replay(d.redis, d.client.rt.cluster)
    assert (report.replayed, report.differ, d.redis.xlen(d.keys.deadletter)) == (len(ids), 0, 0)
    d.assert_ledger_consistent()


def test_a_batch_that_keeps_killing_workers_is_dead_lettered_whole_each_request_answered(
    deployment: Callable[..., Deployment],
) -> None:
    d = deployment(max_crashes=2)
    ids = ["p-0", "p-1", "p-2"]
    _slow_batch(d, ids)
    for start in (1, 2):  # each start is killed once it claimed every request (it drives them)
        wait_until(lambda s=start: _all_claimed(d, ids, s), 120, f"delivery {start}", interval=0.002)
        _kill_pool(d)
    for rid in ids:
        result = d.client.wait(rid, timeout=120, terminal=True)
        assert result["status"] == "rejected" and result["error"]["code"] == "dead_lettered"
    letters = [fields for _, fields in d.redis.xrange(d.keys.deadletter)]
    assert sorted((f["request_id"], f["task"], f["reason"]) for f in letters) == [
        (rid, DECIDE_BATCH, "worker_lost_repeatedly") for rid in ids]
    assert all(d.outcomes()[rid] == {"terminal": 1, "rejected": 1} for rid in ids)
    assert d.client.rt.cluster.instance_meta() == {}


def test_cancel_of_one_request_inside_a_queued_batch(deployment: Callable[..., Deployment]) -> None:
    d = deployment()
    d.client.apply_cluster(cluster(2, 8))
    ids = ["c-0", "c-1", "c-2"]
    d.client.submit_many([llm_request(rid) for rid in ids])  # no worker yet: the batch waits queued
    assert d.client.cancel("c-1")["status"] == "cancelled"
    d.start_workers(1)
    wait_until(lambda: d.settled(set(ids)), 60, "the batch decided")
    outcomes = d.outcomes()
    assert outcomes["c-0"] == outcomes["c-2"] == {"terminal": 1, "scheduled": 1}
    assert outcomes["c-1"] == {"terminal": 1, "cancelled": 1}
    booked = sorted(meta.request_id or "" for meta in d.client.rt.cluster.instance_meta().values())
    assert booked == ["c-0", "c-2"]
    assert "c-1" not in _decisions(d)
    d.assert_ledger_consistent()


def test_a_release_wakes_the_parked_requests_in_one_batch(deployment: Callable[..., Deployment]) -> None:
    d = deployment()
    d.client.apply_cluster(cluster(1, 4))
    d.start_workers(1)
    assert d.client.submit(llm_request("big", tp=4), wait=True, timeout=60)["status"] == "scheduled"
    parked = [f"w-{n}" for n in range(4)]
    d.client.submit_many([llm_request(rid) for rid in parked])
    wait_until(lambda: d.redis.hlen(d.keys.parked) == len(parked), 60, "every request parked")
    d.client.cancel("big")  # releases 4 GPUs: all four fit

    wait_until(lambda: d.settled({"big", *parked}), 60, "the woken requests decided")
    assert all(d.outcomes()[rid]["scheduled"] == 1 for rid in parked), d.outcomes()
    woken = [d.redis.hget(d.keys.request(rid), "decider") for rid in parked]
    assert len(set(woken)) == 1  # one gpusched.decide_batch message decided the wake-up
    assert replay(d.redis, d.client.rt.cluster).differ == 0


def test_a_lost_worker_s_bookings_are_rescheduled_in_one_batch(deployment: Callable[..., Deployment]) -> None:
    d = deployment()
    snapshot = cluster(2, 4)
    d.client.apply_cluster(snapshot)
    d.start_workers(1)
    placed = [f"m-{n}" for n in range(4)]
    d.client.submit_many([llm_request(rid) for rid in placed])
    wait_until(lambda: d.settled(set(placed)), 60, "the placements")
    lost = {meta.request_id for meta in d.client.rt.cluster.instance_meta().values() if 1 in meta.workers}
    assert len(lost) >= 2  # spread: both workers hold some

    d.client.apply_cluster({**snapshot, "workers": snapshot["workers"][1:]})  # worker 1 vanishes
    successors = {f"{rid}~1" for rid in lost}
    wait_until(lambda: successors <= set(d.outcomes()) and d.idle(), 60, "the rescheduled requests")
    deciders = {d.redis.hget(d.keys.request(rid), "decider") for rid in successors}
    assert len(deciders) == 1  # one gpusched.decide_batch message
    assert replay(d.redis, d.client.rt.cluster).differ == 0
    d.assert_ledger_consistent()


def test_a_snapshot_s_lost_bookings_are_recorded_together_and_a_taken_id_moves_on(
    deployment: Callable[..., Deployment],
) -> None:
    """The follow-up records a storm's new requests together (a few round trips for all) and
    sends them in one batch; a booking whose first successor id another request holds takes
    the next free one, as one recorded alone does. Every move is noted on the old record,
    decided once, and replays identical."""
    d = deployment()
    snapshot = cluster(3, 4)
    d.client.apply_cluster(snapshot)
    d.start_workers(2)
    placed = [f"m-{n}" for n in range(4)]
    taken = [f"{rid}~1" for rid in placed]  # the ids their first moves would take
    d.client.submit_many([llm_request(rid) for rid in [*placed, *taken]])  # one message: deterministic
    wait_until(lambda: d.settled({*placed, *taken}), 60, "the placements")
    metas = d.client.rt.cluster.instance_meta().values()
    lost = {str(meta.request_id) for meta in metas if 1 in meta.workers}
    assert lost & set(placed)  # at least one booking whose first successor id is taken

    d.client.apply_cluster({**snapshot, "workers": snapshot["workers"][1:]})  # worker 1 vanishes
    moved = {rid: str(d.redis.hget(d.keys.request(rid), "moved_to")) for rid in lost}
    assert len(set(moved.values())) == len(lost) and not set(moved.values()) & {*placed, *taken}
    wait_until(lambda: set(moved.values()) <= set(d.outcomes()) and d.idle(), 60, "the rescheduled requests")
    origins = [d.redis.hget(d.keys.request(rid), "reschedule_of") for rid in moved.values()]
    assert all(origins) and len(set(origins)) == len(lost)  # each names the booking it replaces
    deciders = {d.redis.hget(d.keys.request(rid), "decider") for rid in moved.values()}
    assert len(deciders) == 1  # one gpusched.decide_batch message
    assert all(d.outcomes()[rid]["terminal"] == 1 for rid in moved.values())
    assert replay(d.redis, d.client.rt.cluster).differ == 0
    d.assert_ledger_consistent()
