"""A control plane that reads only ``gpusched:results`` follows every placement through its life.

Real worker processes; the control plane below knows nothing but the results
stream (a consumer group): submit → placement → move (worker lost) → suspended
and resumed rescheduling → cancel (parked and placed) → release. At the end its
view of what runs where must equal the service's ledger.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from service.support import Deployment, cluster, llm_request, wait_until

from tasks import ack, ensure_group, read_group

pytestmark = pytest.mark.service

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ControlPlane:
    """What a control plane knows from the results stream alone."""

    client: redis.Redis
    stream: str
    placements: dict[str, int] = field(default_factory=dict)  # request id → worker id
    finished: dict[str, str] = field(default_factory=dict)  # request id → terminal status
    waiting: set[str] = field(default_factory=set)
    suspended: bool = False
    seen: list[tuple[str, str, str]] = field(default_factory=list)  # (request id, status, reschedule_of)

    def __post_init__(self) -> None:
        ensure_group(self.client, self.stream, "cp")

    def poll(self) -> None:
        entries = read_group(self.client, self.stream, "cp", "cp-1", count=100, block_ms=100)
        for _, fields in entries:
            self._handle(fields["request_id"], fields["status"], fields.get("reschedule_of", ""),
                         json.loads(fields["result"]))
        ack(self.client, self.stream, "cp", [entry_id for entry_id, _ in entries])

    def _handle(self, rid: str, status: str, moved_from: str, result: dict[str, Any]) -> None:
        self.seen.append((rid, status, moved_from))
        if status == "scheduled":
            assert moved_from not in self.placements, "a move arrived before its old placement's release"
            self.placements[rid] = result["candidates"][result["selected"]]["worker_id"]
            self.waiting.discard(rid)
        elif status == "released":
            del self.placements[rid]
        elif status == "unschedulable":
            self.waiting.add(rid)
        elif status in ("reschedule_suspended", "reschedule_resumed"):
            self.suspended = status == "reschedule_suspended"
        if status in ("cancelled", "rejected"):
            self.waiting.discard(rid)
        if status in ("scheduled", "cancelled", "rejected"):
            assert rid not in self.finished, f"second terminal result for {rid}"
            self.finished[rid] = status

    def until(self, predicate: Callable[[ControlPlane], bool], what: str) -> None:
        def check() -> bool:
            self.poll()
            return predicate(self)

        wait_until(check, 60, what, interval=0)


def _state(d: Deployment, wid: int, state: str) -> None:
    queued = d.client.cluster_event({"kind": "worker_state", "worker_id": wid, "state": state})
    assert queued["status"] == "queued"


def test_a_control_plane_follows_submit_placement_move_cancel_and_release_through_results_alone(
    deployment: Callable[..., Deployment],
) -> None:
    d = deployment(unreachable_grace_s=1, ready_stable_s=1, max_unreachable_fraction=0.5)
    d.start_workers(1)
    d.client.apply_cluster(cluster(4, 1))  # four one-GPU workers: one 7B instance each
    cp = ControlPlane(d.client.rt.client, d.keys.results)

    d.client.submit(llm_request("app"))
    cp.until(lambda c: "app" in c.placements, "app placed")
    first = cp.placements["app"]

    _state(d, first, "unreachable")  # lost for longer than the grace period: moved
    cp.until(lambda c: "app~1" in c.placements, "app moved")
    assert ("app", "released", "") in cp.seen and ("app~1", "scheduled", "app") in cp.seen
    assert cp.seen.index(("app", "released", "")) < cp.seen.index(("app~1", "scheduled", "app"))
    moved = cp.placements["app~1"]
    assert moved != first

    d.client.submit(llm_request("nowhere", worker_selector={"gpu": "nowhere"}))
    cp.until(lambda c: "nowhere" in c.waiting, "the unplaceable request announced")
    d.client.cancel("nowhere")
    cp.until(lambda c: c.finished.get("nowhere") == "cancelled", "the parked request withdrawn")

    d.client.submit(llm_request("batch"))
    cp.until(lambda c: "batch" in c.placements, "batch placed")
    spare = next(w for w in (1, 2, 3, 4) if w not in (first, moved, cp.placements["batch"]))
    _state(d, cp.placements["batch"], "unreachable")
    _state(d, spare, "unreachable")  # 3 of 4 down: more than half, nothing may move
    cp.until(lambda c: c.suspended, "rescheduling suspended")
    assert "batch" in cp.placements
    _state(d, spare, "ready")  # 2 of 4 down: rescheduling resumes, batch moves to the spare
    cp.until(lambda c: not c.suspended and "batch~1" in c.placements, "rescheduling resumed, batch moved")
    assert cp.placements["batch~1"] == spare and "batch" not in cp.placements

    env = {**os.environ, **d.env}
    cancelled = subprocess.run([sys.executable, "-m", "tasks.edges.cli", "cancel", "app~1"], env=env,
                               capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert cancelled.returncode == 0 and json.loads(cancelled.stdout)["status"] == "released"
    cp.until(lambda c: "app~1" not in c.placements, "app~1 released")

    # what the control plane believes runs where is exactly what the service books
    booked = {meta.request_id: meta.workers[0] for meta in d.client.rt.cluster.instance_meta().values()}
    assert cp.placements == booked == {"batch~1": spare}
    assert set(cp.finished) == {"app", "app~1", "nowhere", "batch", "batch~1"}
    d.assert_ledger_consistent()
