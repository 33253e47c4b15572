"""Freed GPUs wake the parked requests they can hold, no more, and lose no wake-up."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from service.support import GIB, RTX_4090, Deployment, cluster, llm_request, wait_until, worker_row

from tasks.decision.replay import replay
from tasks.state.parking import ParkedEntry

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


def _precise(rid: str) -> dict[str, object]:
    request = llm_request(rid)
    request["model"]["backend_parameters"] = ["--tp-size", "1"]  # type: ignore[index]
    return {**request, "policy": "precise"}


def _decisions(d: Deployment) -> int:
    return len(d.events("sched.decision.made"))


def test_a_snapshot_wakes_only_what_it_changes_and_a_release_only_what_it_frees(
    deployment: Callable[..., Deployment],
) -> None:
    """Issue 17, item 8: re-applying an identical snapshot re-decided every parked request, and one
    release woke every parked ``precise`` request. Now the snapshot's real changes are derived
    (none: nobody is woken, no decision runs, the wake epoch stays), and a release wakes, per
    policy, as many as the freed GPU could hold (gpustack: its share floor; precise: bytes)."""
    d = deployment(wake_recheck_s=0.5)
    snapshot = cluster(2, 2)
    d.client.apply_cluster(snapshot)
    d.start_workers(2)
    for n in range(4):
        assert d.client.submit(llm_request(f"fill-{n}"), wait=True, timeout=60)["status"] == "scheduled"  # type: ignore[index]
    waiters = [f"g-{n:02d}" for n in range(WAITERS)] + [f"p-{n:02d}" for n in range(WAITERS)]
    for rid in waiters:
        d.client.submit(llm_request(rid) if rid.startswith("g") else _precise(rid))
    wait_until(lambda: len(d.client.rt.parked.entries()) == len(waiters) and d.idle(), 180,
               "the waiters to park")
    decisions, epoch = _decisions(d), d.redis.get(d.keys.epoch)

    d.client.apply_cluster(snapshot)  # the same snapshot again
    wait_until(lambda: d.idle() and d.redis.zcard(d.keys.followups) == 0, 60, "the snapshot's follow-up")
    assert d.events("sched.request.woken") == []  # before: all 24
    assert (_decisions(d), d.redis.get(d.keys.epoch)) == (decisions, epoch)

    floors = {ParkedEntry.model_validate_json(raw).floor_bytes
              for rid, raw in d.client.rt.parked.entries().items() if rid.startswith("p")}
    (floor,) = floors  # every precise waiter: SGLang's context + a quarter of the weights
    precise_slots = RTX_4090 // floor  # what one freed 4090 can hold of them at most (5 for a 7B)
    floors = {ParkedEntry.model_validate_json(raw).floor_bytes
              for rid, raw in d.client.rt.parked.entries().items() if rid.startswith("p")}
    (floor,) = floors  # every precise waiter: SGLang's context + a quarter of the weights
    precise_slots = RTX_4090 // floor  # what one freed 4090 can hold of them at most (5 for a 7B)
    d.client.cluster_event({"kind": "instance_deleted", "request_id": "fill-0"})
    wait_until(lambda: len(_scheduled(d)) == 5 and d.idle(), 120, "one waiter to take the freed GPU")
    wait_until(lambda: d.redis.zcard(d.keys.followups) == 0, 60, "the follow-up's last check")
    woken = {e["request_id"] for e in d.events("sched.request.woken")}
    # before: every precise waiter; now gpustack's share floor admits one, precise's bytes a few
    assert sum(rid.startswith("g") for rid in woken) <= 1
    assert sum(rid.startswith("p") for rid in woken) <= precise_slots < WAITERS
    assert len(d.client.rt.parked.entries()) == len(waiters) - 1
    d.assert_ledger_consistent()
    report = replay(d.redis, d.client.rt.cluster)
    assert (report.identical, report.differ, report.skipped) == (report.replayed, 0, [])


def _held_cluster(hosts: int) -> dict[str, object]:
    """``hosts`` × 2 RTX 4090s, each GPU held by a control-plane instance of 20 GiB (bench_wakeups)."""
    instances = [
        {"id": n, "name": f"cp-{n}", "model_id": 900, "worker_id": (n + 1) // 2,
         "worker_name": f"node-{(n + 1) // 2:04d}", "gpu_type": "cuda", "gpu_indexes": [(n + 1) % 2],
         "computed_resource_claim": {"vram": {str((n + 1) % 2): 20 * GIB}}}
        for n in range(1, 2 * hosts + 1)
    ]
    return {"workers": [worker_row(w, 2) for w in range(1, hosts + 1)], "model_instances": instances}


def _drained(d: Deployment) -> bool:
    return d.idle() and d.redis.zcard(d.keys.followups) == 0


def test_a_release_decides_only_what_its_freed_gpu_can_fit(deployment: Callable[..., Deployment]) -> None:
    """Issue 22: a release of one GPU with parked requests ran far more decisions than it could
    fit (264 for 1 booking with 1,000 parked). A precise 7B at tp 1 parked with a floor of a
    quarter of its weights (4.3 GB), which the freed GPU's *neighbour* reached (4.5 GB beside its
    20 GiB instance): every recheck offered that unchanged GPU again and woke one more precise
    request, which decided and parked again. Now a release offers only the GPUs it freed, the
    precise floor is what the fit needs (16.2 GB), and both kinds of floor share the freed
    bytes: one release, one decision, one booking — the snapshot that frees a GPU and the
    ``instance_deleted`` alike; an identical snapshot decides nothing."""
    d = deployment(wake_recheck_s=0.3)
    document = _held_cluster(2)
    d.client.apply_cluster(document)
    d.start_workers(2)
    waiters = [f"g-{n:02d}" for n in range(WAITERS // 2)] + [f"p-{n:02d}" for n in range(WAITERS // 2)]
    for rid in sorted(waiters, key=lambda r: r[2:]):  # alternately gpustack and precise, as in the bench
        d.client.submit(llm_request(rid) if rid.startswith("g") else _precise(rid))
    wait_until(lambda: len(d.client.rt.parked.entries()) == len(waiters) and _drained(d), 180,
               "the waiters to park")

    def decisions_after(change: Callable[[], object], scheduled: int) -> int:
        before = _decisions(d)
        change()
        # drained: no decision queued or running and no follow-up left (a recheck still due is one)
        wait_until(lambda: len(_scheduled(d)) == scheduled and _drained(d), 120, "the change to settle")
        return _decisions(d) - before

    assert decisions_after(lambda: d.client.apply_cluster(document), 0) == 0
    fewer = {**document, "model_instances": document["model_instances"][1:]}  # type: ignore[index]
    assert decisions_after(lambda: d.client.apply_cluster(fewer), 1) == 1  # before: 1 + every precise
    assert decisions_after(
        lambda: d.client.cluster_event({"kind": "instance_deleted", "instance_id": 2}), 2) == 1
    assert len(d.client.rt.parked.entries()) == len(waiters) - 2
    d.assert_ledger_consistent()
    report = replay(d.redis, d.client.rt.cluster)
    assert (report.identical, report.differ, report.skipped) == (report.replayed, 0, [])
