"""The dry run of a snapshot: what it would add, remove and change, and nothing changes."""

from __future__ import annotations

import copy

from service_builders import small_request, uniform_cluster

from tasks.flows.snapshot_diff import diff_snapshot
from tasks.intake.snapshots import parse_snapshot
from tasks.testing import Harness


def test_the_diff_names_workers_instances_and_bookings_and_writes_nothing(h: Harness) -> None:
    current = uniform_cluster(4, 1)
    h.apply(current)
    h.submit(small_request("r", worker_selector={}))
    h.pump()
    (booked,) = [m.workers[0] for m in h.rt.cluster.instance_meta().values()]
    new = copy.deepcopy(current)
    new["workers"] = [row for row in new["workers"] if row["id"] != booked]
    new["workers"][0]["labels"] = {"changed": "yes"}
    extra = copy.deepcopy(new["workers"][0])
    extra.update(id=9, name="w9")
    new["workers"].append(extra)
    new["model_instances"] = [{"id": 7, "name": "cp", "worker_id": 9, "gpu_indexes": [0],
                               "computed_resource_claim": {"vram": {"0": 1}}}]
    version = h.rt.cluster.version()
    diff = diff_snapshot(h.rt, parse_snapshot(new))
    assert diff["workers"] == {"added": [9], "removed": [booked], "changed": [new["workers"][0]["id"]],
                               "unchanged": 2}
    assert diff["instances"] == {"added": ["id:7"], "removed": [], "changed": [], "unchanged": 0}
    assert diff["bookings"] == {"kept": 0, "dropped": ["r"]}
    assert diff["removal"] == {
        "removes": 1, "of": 4, "max_removed_fraction": 0.5, "needs_allow_removal": False,
    }
    assert diff["applies"] is True and h.rt.cluster.version() == version


def test_the_diff_says_when_the_removal_needs_confirmation(h: Harness) -> None:
    h.apply(uniform_cluster(4, 1))
    one = {"workers": uniform_cluster(4, 1)["workers"][:1], "model_instances": []}
    diff = diff_snapshot(h.rt, parse_snapshot(one))
    assert diff["removal"]["needs_allow_removal"] and diff["applies"] is False
    assert diff_snapshot(h.rt, parse_snapshot(one), allow_removal=True)["applies"] is True
