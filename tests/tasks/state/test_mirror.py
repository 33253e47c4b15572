"""The per-process mirror: equal to a fresh read, and reloaded when Redis went back in time."""

from __future__ import annotations

import json
from typing import Any

import pytest
from builders import RTX_4090, uniform_worker
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from service_builders import small_request, uniform_cluster

from tasks.decision.core_call import run_core
from tasks.state.mirror import ClusterMirror
from tasks.testing import Harness


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["submit", "delete", "down", "up", "add", "remove"]), max_size=14))
def test_the_incremental_mirror_equals_a_fresh_read(ops: list[str]) -> None:
    h = Harness()
    h.apply(uniform_cluster(workers=3, gpus=2))
    mirror = h.rt.mirror
    for n, op in enumerate(ops):
        _apply_op(h, op, n)
        h.pump()
        incremental = mirror.sync()
        fresh = ClusterMirror(h.rt.cluster).reload()
        assert incremental.version == fresh.version
        assert _dumped(incremental.worker_list()) == _dumped(fresh.worker_list())
        assert list(incremental.instances) == list(fresh.instances)
        assert _dumped(incremental.instance_list()) == _dumped(fresh.instance_list())


@pytest.mark.parametrize("then", ["nothing", "a_new_change", "more_changes_than_were_lost"])
def test_the_mirror_reloads_when_redis_went_back_in_time(then: str) -> None:
    """An AOF that lost its tail: the mirror must not keep the lost bookings."""
    h = Harness()
    h.apply(uniform_cluster(workers=2, gpus=2))
    h.rt.mirror.sync()
    saved = {key: h.rt.client.dump(key) for key in h.rt.client.keys("*")}
    for n in range(3):
        h.submit(small_request(f"r{n}"))
    h.pump()
    assert h.rt.mirror.sync().instances  # the process saw the bookings
    changes = {"nothing": 0, "a_new_change": 1, "more_changes_than_were_lost": 5}[then]
    _restore_and_change(h, saved, changes)  # a new timeline; past the lost versions, the version looks fine
    _assert_the_prefetched_sync_matches_a_fresh_read(h)


def _restore_and_change(h: Harness, saved: dict[Any, Any], changes: int) -> None:
    """Put Redis back to the dumped keys, then record ``changes`` worker state flips."""
    h.rt.client.flushall()
    for key, value in saved.items():
        h.rt.client.restore(key, 0, value)
    for n in range(changes):
        h.event({"kind": "worker_state", "worker_id": 2, "state": "not_ready" if n % 2 == 0 else "ready"})


def _assert_the_prefetched_sync_matches_a_fresh_read(h: Harness) -> None:
    """The decide path's sync (version and changes read in a batch) equals a full read, with no instance."""
    batch = h.rt.partition.batch()
    read = h.rt.mirror.read_changes(batch)
    batch.execute()
    assert read is not None
    synced = h.rt.mirror.sync(read.value)
    fresh = ClusterMirror(h.rt.cluster).reload()
    assert synced.version == fresh.version
    assert list(synced.instances) == list(fresh.instances) == []
    assert _dumped(synced.worker_list()) == _dumped(fresh.worker_list())


def _dumped(rows: list[Any]) -> list[dict[str, Any]]:
    """Field values only (the core memoises private views on the objects it has seen)."""
    return [row.model_dump() for row in rows]


def _apply_op(h: Harness, op: str, n: int) -> None:
    wid = 1 + n % 3
    if op == "submit":
        h.submit(small_request(f"r{n}"))
    elif op == "delete":
        h.event({"kind": "instance_deleted", "request_id": f"r{n - 1}"})
    elif op in ("down", "up"):
        state = "unreachable" if op == "down" else "ready"
        h.event({"kind": "worker_state", "worker_id": wid, "state": state})
    elif op == "add":
        h.event({"kind": "worker_added", "worker": uniform_worker(10 + n, f"x{n}", 1, RTX_4090)})
    else:
        h.event({"kind": "worker_removed", "worker_id": wid})


def test_the_mirror_reloads_when_the_new_timeline_sorts_before_its_position(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A failover to a replica whose clock is behind: new changes get ids below the mirror's position."""
    import fakeredis.model._stream as fake_stream

    real_time = fake_stream.time
    h = Harness()
    h.apply(uniform_cluster(workers=2, gpus=2))
    h.rt.mirror.sync()
    saved = {key: h.rt.client.dump(key) for key in h.rt.client.keys("*")}
    ahead = type("Clock", (), {"time": staticmethod(lambda: real_time.time() + 3600)})
    monkeypatch.setattr(fake_stream, "time", ahead)  # the old primary's clock ran an hour ahead
    for n in range(3):
        h.submit(small_request(f"r{n}"))
    h.pump()
    assert h.rt.mirror.sync().instances
    monkeypatch.setattr(fake_stream, "time", real_time)
    _restore_and_change(h, saved, 5)  # more changes than were lost: the version alone looks fine
    _assert_the_prefetched_sync_matches_a_fresh_read(h)


def test_a_snapshot_keeps_the_objects_of_the_workers_it_did_not_change() -> None:
    """A decider's memo keeps what it derived from a worker while the worker is the same
    object: after a snapshot that drops one worker and changes another, the others keep
    theirs (their next decision re-derives nothing), and the fold equals a fresh read."""
    h = Harness()
    snapshot = uniform_cluster(workers=4, gpus=2)
    h.apply(snapshot)
    request = json.dumps(small_request("probe"))
    run_core(h.rt.chain, request, "probe", h.rt.mirror.sync(), h.rt.memo)  # the memo derives its views
    before = dict(h.rt.mirror.sync().workers)
    changed = uniform_worker(3, "w3", 4, RTX_4090)  # four GPUs now
    h.apply({**snapshot, "workers": [snapshot["workers"][0], snapshot["workers"][1], changed]})
    after = h.rt.mirror.sync()
    assert sorted(after.workers) == [1, 2, 3]
    assert after.workers[1] is before[1] and after.workers[2] is before[2]
    assert after.workers[3] is not before[3] and len(after.workers[3].gpus) == 4
    fresh = ClusterMirror(h.rt.cluster).reload()
    assert _dumped(after.worker_list()) == _dumped(fresh.worker_list())
    warm = run_core(h.rt.chain, request, "probe", after, h.rt.memo)[1]
    alone = run_core(h.rt.chain, request, "probe", fresh, None)[1]
    assert warm.model_dump_json() == alone.model_dump_json()  # the kept objects decide alike
