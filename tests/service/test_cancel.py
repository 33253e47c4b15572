"""Withdrawing requests with real worker processes: queued, parked, in flight, racing a booking."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from service.support import Deployment, cluster, llm_request, wait_until

from tasks.decision.decide import decide
from tasks.intake.requests import normalize
from tasks.runtime.celery_app import TaskSender, client_app

pytestmark = pytest.mark.service

ROOT = Path(__file__).resolve().parents[2]


def _terminals(d: Deployment, rid: str) -> list[str]:
    return [r["status"] for r in d.results() if r["request_id"] == rid and r["terminal"] == "1"]


def _booked(d: Deployment) -> set[str]:
    return {meta.request_id or "" for meta in d.client.rt.cluster.instance_meta().values()}


def _cli(d: Deployment, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **d.env}
    command = [sys.executable, "-m", "tasks.edges.cli", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_queued_and_parked_requests_are_withdrawn_and_never_book(
    deployment: Callable[..., Deployment],
) -> None:
    d = deployment()
    d.client.apply_cluster(cluster(1, 1))  # one GPU: one 7B instance fits
    d.client.submit(llm_request("queued"))  # no worker yet: its message waits on the queue
    assert d.client.cancel("queued") == {"request_id": "queued", "status": "cancelled", "state": "queued"}
    d.start_workers(1)
    assert d.client.submit(llm_request("first"), wait=True, timeout=60)["status"] == "scheduled"  # type: ignore[index]
    assert d.client.submit(llm_request("waits"), wait=True, timeout=60)["status"] == "unschedulable"  # type: ignore[index]
    assert d.client.rt.records.record("waits")["state"] == "parked"

    withdrawn = _cli(d, "cancel", "waits")
    assert withdrawn.returncode == 0, withdrawn.stderr
    assert json.loads(withdrawn.stdout) == {"request_id": "waits", "status": "cancelled", "state": "parked"}
    unknown = _cli(d, "cancel", "nosuch")
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1 and "nosuch" in unknown.stderr

    d.client.cluster_event({"kind": "instance_deleted", "request_id": "first"})  # capacity frees
    wait_until(lambda: _booked(d) == set(), 60, "first's booking released")
    wait_until(lambda: d.settled({"queued", "first", "waits"}), 60, "the pipeline to settle")
    assert _terminals(d, "queued") == ["cancelled"] and _terminals(d, "waits") == ["cancelled"]
    assert _booked(d) == set()
    assert [e["request_id"] for e in d.events("sched.decision.made")].count("queued") == 0
    d.assert_ledger_consistent()


def test_a_cancel_while_the_decision_is_in_flight_wins(deployment: Callable[..., Deployment]) -> None:
    d = deployment(decide_lock_wait_s=60)
    d.start_workers(1)
    d.client.apply_cluster(cluster(1, 1))
    d.redis.set(d.keys.decide_lock, "held-by-the-test", px=120_000)  # the worker's decider waits for it
    d.client.submit(llm_request("inflight"))
    wait_until(lambda: d.client.rt.records.record("inflight").get("state") == "deciding", 60,
               "the worker to begin the decision")
    outcome = d.client.cancel("inflight")
    assert outcome == {"request_id": "inflight", "status": "cancelled", "state": "deciding"}
    d.redis.delete(d.keys.decide_lock)  # the decision goes on, and refuses on the done record
    assert d.client.submit(llm_request("next"), wait=True, timeout=60)["status"] == "scheduled"  # type: ignore[index]
    wait_until(lambda: d.settled({"inflight", "next"}), 60, "the pipeline to settle")
    assert _terminals(d, "inflight") == ["cancelled"] and _booked(d) == {"next"}
    d.assert_ledger_consistent()


def test_a_cancel_racing_a_booking_releases_it(deployment: Callable[..., Deployment]) -> None:
    d = deployment()
    d.start_workers(1)
    d.client.apply_cluster(cluster(1, 1))
    rt = d.client.rt
    # a decision in flight: decided and booked here, its publish step not yet run
    request = normalize(llm_request("race"))
    assert rt.records.accept(request.request_id, request.request_json, request.digest).accepted
    step = decide(rt, "race", 0, 0, "in-process-decider")
    assert step is not None and step.action == "publish" and rt.records.record("race")["state"] == "booked"
    parked = d.client.submit(llm_request("parked"), wait=True, timeout=60)  # the GPU is booked
    assert parked["status"] == "unschedulable"  # type: ignore[index]
    outcome = d.client.cancel("race")  # lands between the booking and its publish
    assert outcome["status"] == "cancelled" and outcome["state"] == "booked"
    assert outcome["woken"] == ["parked"]
    sender = client_app(d.settings)
    try:
        TaskSender(sender).resume(step.to_dict())  # the late publish step, run by the worker
    finally:
        sender.close()
    wait_until(lambda: _terminals(d, "parked") == ["scheduled"], 60, "the freed GPU to place 'parked'")
    wait_until(lambda: d.settled({"race", "parked"}), 60, "the pipeline to settle")
    assert _terminals(d, "race") == ["cancelled"] and _booked(d) == {"parked"}
    d.assert_ledger_consistent()


def test_cancels_racing_a_stream_of_decisions_finish_every_request_once(
    deployment: Callable[..., Deployment],
) -> None:
    d = deployment()
    d.start_workers(2)
    d.client.apply_cluster(cluster(4, 2))  # 8 GPUs for 40 requests: most park
    ids = [f"s{n:02d}" for n in range(40)]
    for rid in ids:
        d.client.submit(llm_request(rid))
    placed = lambda: sum(1 for r in d.results() if r["status"] == "scheduled")  # noqa: E731
    wait_until(lambda: placed() >= 4, 60, "the first placements")
    # cancel everything while the rest is decided; each release wakes a parked request meanwhile
    answers = {rid: d.client.cancel(rid)["status"] for rid in ids}
    assert set(answers.values()) <= {"cancelled", "released"}
    assert sum(answer == "released" for answer in answers.values()) >= 4  # placed before any cancel
    wait_until(lambda: d.settled(set(ids)), 120, "every request to finish")
    for rid in ids:  # placed before its cancel: released; else withdrawn, and it never booked
        expected = ["scheduled"] if answers[rid] == "released" else ["cancelled"]
        assert _terminals(d, rid) == expected, (rid, answers[rid], _terminals(d, rid))
    released = [r["request_id"] for r in d.results() if r["status"] == "released"]
    assert sorted(released) == sorted(rid for rid, answer in answers.items() if answer == "released")
    assert _booked(d) == set()  # every placement was withdrawn or released
    d.assert_ledger_consistent()
