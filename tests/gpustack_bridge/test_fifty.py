"""50 instances over 20 synthetic workers: gpusched places them into GPUStack (place mode), and
GPUStack's own scheduler code, given the same rows in the same order, chooses the same for
every one; on a stock GPUStack the shadow bridge agrees with its scheduler on all 50.

GPUStack's code is the oracle of ``tools/gpustack-oracle`` run from the GPUStack server's own
virtualenv (GPUStack 2.2.3 from PyPI): for each placement (in the order gpusched booked them)
it decides on the cluster the placement was decided on: the workers and instances at the
cluster version of the decision that booked it (its ``sched.decision.made`` event), the
instances as GPUStack's scheduler would read them from its database.

That cluster comes from gpusched's event log, as ``gpusched replay`` rebuilds it, not from the
results stream or GPUStack's rows read at the end: results are published after the decide
lease is released, so two deciders may publish in the other order than they booked; a worker's
``state`` may change while the workload deploys (on a loaded machine a synthetic worker's
heartbeat can miss the shortened grace period: ``not_ready`` for a while), so the final rows
are not what a placement was decided on; and a booking is checked against the GPUs it claims
only, so a worker row that changed between a decision and its booking (a heartbeat's
``not_ready``) is in the cluster at the booking's version but was not in the decision's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tasks.decision.replay import DECISION as DECISION_MADE
from tasks.edges.gpustack_bridge.ids import instance_of
from tasks.state.fold import CHANGE_TYPES, RESERVATION_BOOKED, ClusterFold
from tasks.state.streams import iter_stream
from tests.gpustack_bridge.scenario import World, gpus_over_total, wait_for
from tests.gpustack_bridge.server import gpustack_venv
from tests.gpustack_bridge.synthetic import H100_SPEC
from tests.parity.oracle_client import Oracle

pytestmark = [pytest.mark.gpustack, pytest.mark.slow]

#: (catalog model, replicas, backend parameters): 50 instances on 75 of the 80 GPUs, biggest first.
WORKLOAD = (
    ("qwen2.5-32b", 5, ["--tp-size", "4"]),
    ("qwen2.5-7b", 10, ["--tp-size=2"]),
    ("qwen2.5-7b", 15, []),
    ("qwen2.5-0.5b", 20, []),
)
WORKERS = 20


@pytest.fixture
def oracle() -> Iterator[Oracle]:
    previous = os.environ.get("ORACLE_VENV")
    os.environ["ORACLE_VENV"] = str(gpustack_venv())  # GPUStack 2.2.3 itself, as the server runs it
    try:
        with Oracle() as found:
            yield found
    finally:
        if previous is None:
            os.environ.pop("ORACLE_VENV", None)
        else:
            os.environ["ORACLE_VENV"] = previous


def _deploy(w: World) -> list[dict[str, Any]]:
    """Register the fleet, start the bridge, create the workload one model at a time."""
    names = w.add_workers(WORKERS, [H100_SPEC] * 4)
    assert w.fleet is not None
    w.fleet.start()
    w.wait_workers_ready(names, timeout=120)
    w.start_bridge()
    total = 0
    for key, replicas, params in WORKLOAD:
        w.create_model(key, replicas=replicas, params=params)
        total += replicas
        rows = w.decided(total, timeout=180)
    return rows


def _placement(candidate: dict[str, Any] | None) -> tuple[Any, ...]:
    if candidate is None:
        return ("none",)
    vram = candidate["computed_resource_claim"]["vram"]
    subs = candidate.get("subordinate_workers") or []
    return (
        candidate["worker_id"],
        tuple(candidate["gpu_indexes"]),
        tuple(sorted((str(k), int(v)) for k, v in vram.items())),
        tuple((s["worker_id"], tuple(s["gpu_indexes"])) for s in subs),
    )


def _row_placement(row: dict[str, Any]) -> tuple[Any, ...]:
    subs = (row.get("distributed_servers") or {}).get("subordinate_workers") or []
    vram = (row.get("computed_resource_claim") or {}).get("vram") or {}
    return (
        row["worker_id"],
        tuple(row["gpu_indexes"]),
        tuple(sorted((str(k), int(v)) for k, v in vram.items())),
        tuple((s["worker_id"], tuple(s["gpu_indexes"])) for s in subs),
    )


@dataclass(frozen=True)
class Placed:
    """One booked placement and the cluster its decision saw."""

    ident: int  # the GPUStack instance id
    decided_at: int  # the cluster version of the decision that booked it
    workers: list[dict[str, Any]]  # the workers at that version
    earlier: list[int]  # the instances at that version (GPUStack ids), in cluster-entry order


def _bookings(w: World) -> list[Placed]:
    """Each booked placement, in booking order, with the cluster at its decision's version:
    the event log's cluster changes folded in version order, as ``gpusched replay`` rebuilds a
    decision's cluster. A booking's decision is its request's last ``sched.decision.made``
    before it (the record and the booking are sent in that order in one round trip)."""
    d = w.deployment
    changes: list[tuple[int, dict[str, str]]] = []
    decided: dict[str, int] = {}  # request id -> cluster version of its last decision so far
    booked: dict[int, tuple[int, int]] = {}  # instance id -> (booking version, decision version)
    for _, fields in iter_stream(d.redis, d.keys.events):
        rid = fields.get("request_id") or ""
        if fields["type"] == DECISION_MADE:
            decided[rid] = int(json.loads(fields["data"])["cluster_version"])
        elif fields["type"] in CHANGE_TYPES:
            version = int(fields["cluster_version"])
            changes.append((version, fields))
            ident = instance_of(rid, w.cluster_id)
            if fields["type"] == RESERVATION_BOOKED and ident is not None and ident not in booked:
                assert rid in decided, f"booking of {rid} before any decision of it"
                booked[ident] = (version, decided[rid])
    wanted: dict[int, list[int]] = {}
    for ident, (_, version) in booked.items():
        wanted.setdefault(version, []).append(ident)
    fold, stored = ClusterFold(), d.client.rt.cluster.snapshot_rows
    seen: dict[int, Placed] = {}

    def take(version: int) -> None:
        for ident in wanted.get(version, ()):
            workers = [worker.model_dump(mode="json", exclude_none=True) for worker in fold.worker_list()]
            earlier = [_instance_id(fold, key, w.cluster_id) for key in fold.instances]
            seen[ident] = Placed(ident, version, workers, earlier)

    take(fold.version)
    for version, fields in sorted(changes, key=lambda change: change[0]):
        fold.apply_change(fields["type"], version, json.loads(fields["data"]), stored)
        take(version)
    return [seen[ident] for ident in sorted(booked, key=lambda i: booked[i][0]) if ident in seen]


def _instance_id(fold: ClusterFold, key: str, cluster_id: int) -> int:
    """The GPUStack id of a folded instance: the instance its booking request stands for."""
    rid = fold.meta[key].request_id
    ident = instance_of(rid, cluster_id) if rid else None
    return fold.instances[key].id if ident is None else ident


def _as_pending(row: dict[str, Any]) -> dict[str, Any]:
    cleared = dict(
        row,
        state="pending",
        worker_id=None,
        worker_name=None,
        gpu_type=None,
        gpu_indexes=[],
        computed_resource_claim=None,
        distributed_servers=None,
    )
    return cleared


def test_fifty_instances_placed_by_gpusched_are_what_gpustacks_own_code_chooses(
    world: Callable[..., World],
    oracle: Oracle,
) -> None:
    w = world("place")
    rows = _deploy(w)
    assert sum(r["state"] == "running" for r in rows) == 50
    assert gpus_over_total(w.server, w.cluster_id) == []
    final_states = {r["id"]: r.get("state") for r in w.rows("workers")}
    models = {m["id"]: m for m in w.rows("models")}
    by_id = {r["id"]: r for r in rows}
    bookings = wait_for(lambda: len(b := _bookings(w)) == 50 and b, 30, "50 booked placements")
    assert sorted(p.ident for p in bookings) == sorted(by_id)
    identical = 0
    for k, placed in enumerate(bookings):
        ident, workers = placed.ident, placed.workers
        assert sorted(wk["id"] for wk in workers) == sorted(final_states), f"instance {ident}: workers"
        assert ident not in placed.earlier, f"instance {ident}: in the cluster it was decided on"
        request = {
            "request_id": f"check-{ident}",
            "policy": "gpustack",
            "model": models[by_id[ident]["model_id"]],
            "workers": workers,
            "model_instances": [*(by_id[i] for i in placed.earlier), _as_pending(by_id[ident])],
        }
        theirs = oracle.decide(request)
        assert theirs["status"] == "scheduled", json.dumps(theirs)[:2000]
        chosen = theirs["candidates"][theirs["selected"]]
        moved = {wk["id"]: wk.get("state") for wk in workers if wk.get("state") != final_states[wk["id"]]}
        assert _placement(chosen) == _row_placement(by_id[ident]), (
            f"instance {ident} (placement {k}, decided at v{placed.decided_at} on {len(placed.earlier)}"
            f" instances; workers whose state then was not the final one: {moved})"
        )
        identical += 1
    assert identical == 50


def test_shadow_agrees_on_fifty_instances_placed_by_a_stock_gpustack(world: Callable[..., World]) -> None:
    from tests.gpustack_bridge.test_shadow import _report

    w = world("shadow", workers=0)
    rows = _deploy(w)
    assert sum(r["state"] == "running" for r in rows) == 50
    assert gpus_over_total(w.server, w.cluster_id) == []
    report = wait_for(lambda: (r := _report(w))["decisions"] >= 50 and r, 60, "50 shadow decisions")
    assert report["differ"] == 0, json.dumps(report["differences"], indent=1)[:4000]
    assert report["agree"] + report["tie"] == 50
