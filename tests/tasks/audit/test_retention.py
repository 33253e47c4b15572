"""Retention: checkpoints, trimming behind them (archived), old snapshots and parked requests go."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders import RTX_4090, uniform_worker
from service_builders import small_request, uniform_cluster

from tasks.audit.archive import archive_files, read_archive
from tasks.audit.checkpoints import checkpoint_positions, load_checkpoint
from tasks.audit.retention import checkpoint_now, expire_parked, maintain, scan, trim
from tasks.decision.replay import replay
from tasks.testing import Harness


def _harness(**settings: Any) -> Harness:
    base = Harness().settings
    return Harness(settings=base.model_copy(update={"audit_checkpoints_kept": 1, **settings}))


def _busy(h: Harness, first: int, count: int) -> None:
    """``count`` requests on the 2 × 2 GPU cluster; every other one is deleted again."""
    for n in range(first, first + count):
        h.submit(small_request(f"r{n}"))
        h.pump()
        if n % 2 == 0:
            h.event({"kind": "instance_deleted", "request_id": f"r{n}"})
            h.pump()


def _decisions(h: Harness) -> int:
    return len(h.events(["sched.decision.made"]))


def test_a_trimmed_log_replays_identically_from_its_checkpoint(tmp_path: Path) -> None:
    h = _harness(audit_archive_dir=str(tmp_path))
    h.apply(uniform_cluster(workers=2, gpus=2))
    _busy(h, 0, 6)
    before = _decisions(h)
    scan(h.rt)
    version = checkpoint_now(h.rt)
    _busy(h, 6, 6)
    h.submit(small_request("waits", worker_selector={"gpu": "none"}))  # parks after the checkpoint
    h.pump()
    after = _decisions(h) - before
    removed, _ = trim(h.rt)
    assert removed > 0 and _decisions(h) == after  # only the decisions after the checkpoint are left
    report = replay(h.rt.client, h.rt.cluster)
    assert report.start_version == version
    assert (report.replayed, report.identical, report.differ, report.skipped) == (after, after, 0, [])
    whole = replay(h.rt.client, h.rt.cluster, archive=archive_files(tmp_path))
    assert whole.start_version is None
    assert (whole.replayed, whole.identical, whole.skipped) == (before + after, before + after, [])


def test_a_request_pending_at_the_checkpoint_replays_after_the_trim() -> None:
    h = _harness()
    h.apply(uniform_cluster(workers=1, gpus=1))
    h.submit(small_request("first"))
    h.submit(small_request("second"))  # no room: parked
    h.pump()
    scan(h.rt)
    version = checkpoint_now(h.rt)
    assert "second" in load_checkpoint(h.rt.client, h.rt.keys, version).requests
    assert "first" not in load_checkpoint(h.rt.client, h.rt.keys, version).requests  # finished
    h.event({"kind": "instance_deleted", "request_id": "first"})
    h.pump()
    trim(h.rt)
    report = replay(h.rt.client, h.rt.cluster, request_id="second")
    assert (report.replayed, report.identical, report.skipped) == (1, 1, [])  # received before the trim


def test_a_decision_read_before_a_checkpoint_is_decided_again() -> None:
    h = _harness()
    h.apply(uniform_cluster(workers=1, gpus=2))
    h.submit(small_request("r"))
    item = h.queue.popleft()
    real = h.rt.mirror.sync

    def checkpoint_meanwhile(*args: Any) -> Any:
        fold = real(*args)
        if h.rt.client.hlen(h.rt.keys.checkpoints) == 0:
            h.event({"kind": "worker_added", "worker": uniform_worker(2, "w2", 1, RTX_4090)})
            checkpoint_now(h.rt)  # lands between the decision's read and its record
        return fold

    h.rt.mirror.sync = checkpoint_meanwhile  # type: ignore[method-assign]
    h.run_decision(item)
    decisions = h.events(["sched.decision.made"])
    assert [d.cluster_version for d in decisions] == [2]  # the version-1 decision was never recorded
    trim(h.rt)
    report = replay(h.rt.client, h.rt.cluster)
    assert (report.replayed, report.identical, report.skipped) == (1, 1, [])


def test_trimming_keeps_the_newest_checkpoints_and_drops_unreferenced_snapshots() -> None:
    h = _harness(audit_checkpoints_kept=2)
    h.apply(uniform_cluster(workers=1, gpus=1))
    first = h.events(["sched.cluster.applied"])[0].data["digest"]
    h.apply(uniform_cluster(workers=2, gpus=1))
    second = h.events(["sched.cluster.applied"])[1].data["digest"]
    scan(h.rt)
    v1 = checkpoint_now(h.rt)
    h.submit(small_request("a"))
    h.pump()
    scan(h.rt)
    v2 = checkpoint_now(h.rt)
    assert trim(h.rt)[1] == 2  # behind v1 (the older of two kept): both applies are gone
    assert h.rt.client.get(h.rt.keys.snapshot(first)) is None
    assert h.rt.client.get(h.rt.keys.snapshot(second)) is None
    h.apply(uniform_cluster(workers=2, gpus=1))  # the same content again: referenced after v2
    h.submit(small_request("b"))
    h.pump()
    scan(h.rt)
    v3 = checkpoint_now(h.rt)
    trim(h.rt)
    assert list(checkpoint_positions(h.rt.client, h.rt.keys)) == [v2, v3] and v1 < v2
    assert h.rt.client.get(h.rt.keys.snapshot(second)) is not None
    report = replay(h.rt.client, h.rt.cluster)
    assert (report.start_version, report.identical, report.skipped) == (v2, report.replayed, [])


def test_maintain_checkpoints_every_n_events_and_trims(tmp_path: Path) -> None:
    h = _harness(audit_checkpoint_every=20, audit_archive_dir=str(tmp_path))
    h.apply(uniform_cluster(workers=2, gpus=2))
    _busy(h, 0, 8)
    done = maintain(h.rt, force=True)
    assert done["checkpoint"] is not None and done["trimmed"] > 0
    assert maintain(h.rt) == {}  # within the interval: another node's pass counts
    archived = list(read_archive(archive_files(tmp_path)))
    assert archived and archived[0][1]["type"] == "sched.cluster.applied"
    assert [entry_id for entry_id, _ in archived] == sorted(
        (entry_id for entry_id, _ in archived), key=lambda i: tuple(map(int, i.split("-")))
    )


def test_a_request_parked_too_long_gets_its_final_result() -> None:
    h = _harness(parked_ttl_s=3600)
    h.apply(uniform_cluster(workers=1, gpus=1))
    h.submit(small_request("a"))
    h.submit(small_request("b"))
    h.pump()
    assert expire_parked(h.rt) == []
    h.clock.advance(3601)
    assert expire_parked(h.rt) == ["b"]
    final = [r for r in h.results() if r["request_id"] == "b"]
    assert [(r["status"], r["terminal"]) for r in final] == [("unschedulable", "0"), ("unschedulable", "1")]
    assert h.record("b")["state"] == "done" and h.rt.client.ttl(h.rt.keys.request("b")) > 0
    assert "b" not in h.rt.parked.entries()
    assert [e.request_id for e in h.events(["sched.request.expired"])] == ["b"]
