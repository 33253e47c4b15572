"""The fold's per-worker index of instances (``ClusterFold.instances_on``) against a walk.

A release of capacity looks at its workers' instances through the index; it is
built once and then follows bookings, releases, in-place replacements and
snapshots. After any sequence of them it must list, per worker, exactly the
instances a walk over the cluster in entry order finds, in that order.
"""

from __future__ import annotations

from builders import instance
from hypothesis import given
from hypothesis import strategies as st

from scheduler_core import ModelInstance, occupied_workers
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
