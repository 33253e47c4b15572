"""The fold's per-worker index of instances (``ClusterFold.instances_on``) against a walk.

A release of capacity looks at its workers' instances through the index; it is
built once and then follows bookings, releases, in-place replacements and
snapshots. After any sequence of them it must list, per worker, exactly the
instances a walk over the cluster in entry order finds, in that order.
"""

from __future__ import annotations

import operator

from builders import instance
from hypothesis import given
from hypothesis import strategies as st

from scheduler_core import ModelInstance, occupied_workers
from scheduler_core.memo import Extended
from tasks.base.rows import InstanceMeta
from tasks.intake.snapshots import SnapshotRows
from tasks.state.fold import ClusterFold

WORKERS = range(1, 5)


def _row(number: int, main: int, follower: int | None) -> ModelInstance:
    subordinates = None if follower is None else [{"worker_id": follower, "gpu_indexes": [0]}]
    return ModelInstance.model_validate(instance(number, main, {0: 1}, subordinates=subordinates))


def _walk(fold: ClusterFold, worker_id: int) -> list[ModelInstance]:
    return [i for i in fold.instance_list() if worker_id in occupied_workers(i)]


_STEP = st.tuples(
    st.sampled_from(["book", "book", "rebook", "release", "snapshot", "read"]),
    st.integers(min_value=0, max_value=9),
    st.sampled_from(list(WORKERS)),
    st.sampled_from([None, *WORKERS]),
)


@given(steps=st.lists(_STEP, max_size=30))
def test_the_index_lists_what_a_walk_finds_after_any_changes(
    steps: list[tuple[str, int, int, int | None]],
) -> None:
    fold = ClusterFold()
    version = 0
    for action, number, main, follower in steps:
        version += 1
        key = f"k{number}"
        row = _row(number, main, follower if follower != main else None)
        meta = InstanceMeta("gpusched", (version, 0), workers=tuple(occupied_workers(row)))
        if (action == "book" and key not in fold.instances) or action == "rebook":
            fold.apply_booked(version, key, row, meta)
        elif action == "release":
            fold.apply_released(version, [key, "absent"])
        elif action == "snapshot":
            kept = [k for k in fold.instances if int(k[1:]) % 2 == 0]
            rows = SnapshotRows(workers=(), instances=((f"s{number}", row),))
            fold.apply_snapshot(version, rows, kept)
        for worker_id in WORKERS:
            assert fold.instances_on(worker_id) == _walk(fold, worker_id)


@given(steps=st.lists(_STEP, max_size=30))
def test_the_instance_tuple_is_entry_order_and_a_new_booking_extends_the_last_one(
    steps: list[tuple[str, int, int, int | None]],
) -> None:
    """``instance_list()`` is always the instances in entry order (the very objects); after a
    booking of a new key it is the tuple read before, extended by that booking, so a
    decider's memo compares it at once; after anything else it is a tuple of its own."""
    fold = ClusterFold()
    version = 0
    for action, number, main, follower in steps:
        version += 1
        key = f"k{number}"
        row = _row(number, main, follower if follower != main else None)
        meta = InstanceMeta("gpusched", (version, 0), workers=tuple(occupied_workers(row)))
        before = fold.instance_list()
        new_key = key not in fold.instances
        if (action == "book" and new_key) or action == "rebook":
            fold.apply_booked(version, key, row, meta)
        elif action == "release":
            fold.apply_released(version, [key, "absent"])
        listed = fold.instance_list()
        assert len(listed) == len(fold.instances)
        assert all(map(operator.is_, listed, fold.instances.values()))
        linked = isinstance(listed, Extended) and listed.base is before
        assert linked == (action in ("book", "rebook") and new_key)
