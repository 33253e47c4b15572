"""Bounded audit state with real processes: checkpoints, trimming, the archive, replay across a trim."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from service.support import Deployment, cluster, llm_request, wait_until

pytestmark = pytest.mark.service

ROOT = Path(__file__).resolve().parents[2]


def _gpusched(d: Deployment, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **d.env}
    command = [sys.executable, "-m", "tasks.edges.cli", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)


def _round(d: Deployment, prefix: str, count: int) -> None:
    """``count`` requests placed, every other one deleted again (bookings come and go)."""
    for n in range(count):
        rid = f"{prefix}-{n:02d}"
        assert d.client.submit(llm_request(rid), wait=True, timeout=60)["status"] == "scheduled"  # type: ignore[index]
        if n % 2 == 0:
            d.client.cluster_event({"kind": "instance_deleted", "request_id": rid})


def test_the_log_is_trimmed_behind_a_checkpoint_and_replays_across_it(
    deployment: Callable[..., Deployment], tmp_path: Path
) -> None:
    archive = tmp_path / "archive"
    d = deployment(audit_checkpoint_every=60, audit_checkpoints_kept=1, maintenance_interval_s=0.3,
                   audit_archive_dir=str(archive), parked_ttl_s=3)
    d.client.apply_cluster(cluster(6, 2))
    first_snapshot = d.events("sched.cluster.applied")[0]["data"]["digest"]
    d.start_workers(2)
    _round(d, "a", 12)
    d.client.apply_cluster(cluster(12, 2))  # a new snapshot; the first is referenced by old events only
    d.client.submit(llm_request("nowhere", worker_selector={"gpu": "h100"}))  # parks, then expires
    _round(d, "b", 12)
    state = d.keys.prefix + ":audit:state"
    wait_until(lambda: d.redis.hget(state, "trimmed_at"), 120, "the retention to trim the log")
    _round(d, "c", 6)
    wait_until(lambda: d.settled({"nowhere"}) and d.outcomes()["nowhere"]["terminal"] == 1, 60,
               "the parked request to expire")
    assert d.outcomes()["nowhere"] == {"notice": 1, "terminal": 1, "unschedulable": 2}
    # A checkpoint of our own, then a round too small to reach the next automatic one
    # (60 events): the live log then surely holds decisions, whenever the last pass ran.
    assert _gpusched(d, "audit", "checkpoint").returncode == 0
    assert _gpusched(d, "audit", "trim").returncode == 0
    _round(d, "d", 2)

    decided = [e for e in d.events("sched.decision.made")]
    everything = len(decided) + sum(
        1 for path in archive.glob("events-*.jsonl") for line in path.read_text().splitlines()
        if '"sched.decision.made"' in line
    )
    assert decided and everything > len(decided)  # part of the log was trimmed into the archive
    assert d.redis.get(d.keys.snapshot(first_snapshot)) is None  # archived with the events
    live = _gpusched(d, "replay")
    assert live.returncode == 0, live.stdout + live.stderr
    assert live.stdout.startswith(f"{len(decided)} replayed, {len(decided)} identical, 0 differ")
    whole = _gpusched(d, "replay", "--archive", str(archive))
    assert whole.returncode == 0, whole.stdout + whole.stderr
    assert whole.stdout.startswith(f"{everything} replayed, {everything} identical, 0 differ")
    d.assert_ledger_consistent()


def test_replay_fails_when_it_cannot_rebuild_a_decision(deployment: Callable[..., Deployment]) -> None:
    d = deployment()
    d.client.apply_cluster(cluster(2, 2))
    d.start_workers(1)
    for n in range(3):
        d.client.submit(llm_request(f"r{n}"), wait=True, timeout=60)
    second = [e for e in d.redis.xrange(d.keys.events) if e[1]["type"] == "sched.decision.made"][1][0]
    d.redis.xtrim(d.keys.events, minid=second)  # trimmed by hand, behind no checkpoint
    replayed = _gpusched(d, "replay")
    assert replayed.returncode == 1  # before: exit 0 with "0 replayed ... 2 skipped"
    assert "2 skipped" in replayed.stdout and "could not be replayed" in replayed.stderr
