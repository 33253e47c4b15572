"""A batch of decisions: booked ahead, recorded only on the cluster version they read."""

from __future__ import annotations

import time
from typing import Any

import pytest
from builders import RTX_4090, uniform_worker
from service_builders import small_request, uniform_cluster

from tasks.decision import batch
from tasks.decision.lease import DecideLease
from tasks.decision.replay import replay
from tasks.state.mirror import ClusterMirror
from tasks.testing import Harness, booking_violations


def _recorded(h: Harness) -> list[tuple[str, int]]:
    """(request id, cluster version) of every recorded decision, in log order."""
    return [(e.request_id or "", int(e.data["cluster_version"])) for e in h.events(["sched.decision.made"])]


def _accepted(h: Harness, ids: list[str]) -> list[tuple[str, int, int]]:
    for rid in ids:
        assert h.submit(small_request(rid)).status == "accepted"
    h.queue.clear()  # the batch decides them, not their single messages
    return [(rid, 0, 0) for rid in ids]


def test_a_batch_books_ahead_and_records_each_decision_at_the_version_it_read() -> None:
    h = Harness()
    h.apply(uniform_cluster(2, 2))
    items = _accepted(h, ["a", "b", "c"])
    progress = batch.decide_batch(h.rt, items, "batch-1")
    assert (progress.outcomes, progress.rounds) == (dict.fromkeys(["a", "b", "c"], "published"), 1)
    assert _recorded(h) == [("a", 1), ("b", 2), ("c", 3)]  # each saw the bookings before it
    assert {h.record(rid)["booked_version"] for rid in "abc"} == {"2", "3", "4"}
    assert booking_violations(h.rt) == []
    report = replay(h.rt.client, h.rt.cluster)
    assert (report.replayed, report.identical) == (3, 3)


def test_a_change_landing_during_a_batch_outdates_what_read_its_bookings_ahead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The decisions after the first read a cluster holding the first booking before it was
    committed; a worker added in between takes the version the first booking was foreseen at.
    Recorded as read, those decisions would replay against another cluster: they are refused
    (nothing written), the mirror takes its bookings back, and a second round decides them on
    the fresh snapshot."""
    h = Harness()
    h.apply(uniform_cluster(2, 2))
    items = _accepted(h, ["a", "b", "c"])
    commit = batch._commit
    rounds: list[int] = []

    def change_first(*args: Any) -> None:
        rounds.append(1)
        if len(rounds) == 1:
            h.event({"kind": "worker_added", "worker": uniform_worker(3, "w3", 2, RTX_4090)})
        commit(*args)

    monkeypatch.setattr(batch, "_commit", change_first)
    progress = batch.decide_batch(h.rt, items, "batch-1")

    assert progress.rounds == 2 and set(progress.outcomes) == {"a", "b", "c"}
    assert _recorded(h) == [("a", 1), ("b", 3), ("c", 4)]  # b and c again, after the new worker (v2)
    assert booking_violations(h.rt) == []
    report = replay(h.rt.client, h.rt.cluster)
    assert (report.replayed, report.identical, report.skipped) == (3, 3, [])


def test_a_batch_brings_its_mirror_up_to_date_before_it_tries_the_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a ``cluster apply`` the first decision loads the new snapshot (seconds at 2,000
    workers): loaded before the lease is tried, that happens while another process holds
    it, not inside this batch's hold."""
    h = Harness()
    h.apply(uniform_cluster(2, 2))
    items = _accepted(h, ["a", "b"])
    decider = ClusterMirror(h.rt.cluster)  # a worker process's, synced before the snapshot
    decider.sync()
    h.apply(uniform_cluster(3, 2))  # a new snapshot (the applying process's mirror loads it)
    h.rt.mirror = decider
    seen: list[tuple[int, int]] = []
    try_acquire = DecideLease.try_acquire

    def noting(lease: DecideLease, pending: Any) -> Any:
        seen.append((h.rt.mirror.fold.version, h.rt.cluster.version()))
        return try_acquire(lease, pending)

    monkeypatch.setattr(DecideLease, "try_acquire", noting)
    progress = batch.decide_batch(h.rt, items, "batch-1")
    assert progress.outcomes == dict.fromkeys(["a", "b"], "published")
    assert seen[0][0] == seen[0][1]  # the snapshot was in the fold when the lease was tried
    assert replay(h.rt.client, h.rt.cluster).differ == 0


def test_a_batch_waits_out_a_busy_lease_rather_than_deciding_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another holder keeps the lease past ``decide_lock_wait_s`` (here until its TTL ends):
    a batch decided without it would be refused as soon as the holder committed, so the
    batch waits up to ``decide_lock_wait_s + decide_lock_ttl_s`` and decides holding it."""
    h = Harness(settings=Harness().settings.model_copy(
        update={"decide_lock_wait_s": 0.01, "decide_lock_ttl_s": 0.3}))
    h.apply(uniform_cluster(2, 2))
    items = _accepted(h, ["a", "b"])
    h.rt.client.set(h.rt.keys.decide_lock, "another-decider", px=300)  # it never releases
    held: list[bool] = []
    commit = batch._commit

    def noting(rt: Any, lease: Any, planned: Any) -> None:
        held.append(lease is not None and lease.held)
        commit(rt, lease, planned)

    monkeypatch.setattr(batch, "_commit", noting)
    progress = batch.decide_batch(h.rt, items, "batch-1")
    assert progress.outcomes == dict.fromkeys(["a", "b"], "published")
    assert held == [True]


def test_a_batch_says_which_step_its_time_went_to(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``batch_finished`` log line's timings: each step's wall time lands in its own
    field (a core slowed by 30 ms per decision shows in ``decide_ms``, a commit slowed by
    20 ms in ``commit_ms``), and the steps add up to no more than the batch's wall time."""
    h = Harness()
    h.apply(uniform_cluster(2, 2))
    items = _accepted(h, ["a", "b", "c"])
    decide_on, commit = batch.decide_on, batch._commit

    def slow_decision(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.03)
        return decide_on(*args, **kwargs)

    def slow_commit(*args: Any) -> None:
        time.sleep(0.02)
        commit(*args)

    monkeypatch.setattr(batch, "decide_on", slow_decision)
    monkeypatch.setattr(batch, "_commit", slow_commit)
    started = time.perf_counter()
    progress = batch.decide_batch(h.rt, items, "batch-1")
    wall_ms = (time.perf_counter() - started) * 1000

    timings = progress.timings()
    assert list(timings) == ["sync_ms", "claim_ms", "decide_ms", "commit_ms"]
    assert (progress.decided, progress.rounds) == (3, 1)
    assert timings["decide_ms"] >= 90 and timings["commit_ms"] >= 20
    assert sum(timings.values()) <= wall_ms
