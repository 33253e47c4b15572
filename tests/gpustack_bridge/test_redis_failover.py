"""Redis fails over under the bridge, against GPUStack's own server.

Real processes: GPUStack's server (the plugin switching its scheduler off) with synthetic
workers, two gpusched workers and the bridge in place mode, every one of them finding its
Redis master through three ``redis-sentinel`` processes (:func:`service.failover_run.start_sentinels`:
a master, a replica, ``down-after-milliseconds`` 1000). Mid-run the replica is frozen behind a
backlog (:func:`service.failover_run.freeze_replicas`), so what the master writes next never
reaches it; a model is created and gpusched decides its instances on the master alone; then the
master is SIGKILLed and the Sentinels promote the replica, which lacks those decisions (the run
counts them), and a third model is created while the failover is under way.

The cluster is sized so that the run ends full (8 GPUs, 8 single-GPU instances): a booking
gpusched forgot or counted twice leaves an instance pending or a GPU over its total.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from service.failover_run import fail_over, freeze_replicas

from tasks.edges.gpustack_bridge.ids import instance_of
from tasks.edges.local_failover import ReplicatedRedis
from tests.gpustack_bridge.scenario import (
    BridgeProcess,
    World,
    assert_consistent,
    placements,
    scheduled_results,
    wait_for,
)
from tests.gpustack_bridge.synthetic import H100_SPEC

pytestmark = [pytest.mark.gpustack, pytest.mark.slow]


def _decided(w: World, model_id: int) -> set[int]:
    """Instances of ``model_id`` with a ``scheduled`` result on the master's results stream (read
    raw: acknowledged by a replica or not)."""
    decided = {
        instance_of(f["request_id"], w.cluster_id)
        for f in w.deployment.results()
        if f["status"] == "scheduled"
    }
    return {row["id"] for row in w.instances(model_id) if row["id"] in decided}


def _seconds_until_placed_again(bridge: BridgeProcess, killed_at: float) -> float:
    """From the kill to the first placement the bridge wrote after it (its own log's clock)."""
    stamps = [
        datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
        for event in bridge.events("gpustack.placed")
    ]
    return min(stamp for stamp in stamps if stamp > killed_at) - killed_at


def test_redis_failing_over_under_the_bridge_places_every_instance_once_and_counts_no_gpu_twice(
    replicated_redis: ReplicatedRedis, failover_world: Callable[..., World]
) -> None:
    began = time.time()
    w = failover_world("place", workers=2)
    w.start_fleet(4, [H100_SPEC, H100_SPEC])  # 8 GPUs; each instance below takes one whole GPU
    bridge = w.start_bridge()
    first = w.create_model("qwen2.5-0.5b", replicas=3)
    before = placements(w.running(3))  # placed and acknowledged by the replica
    frozen = freeze_replicas(replicated_redis)
    second = w.create_model("qwen2.5-0.5b", replicas=3)
    wait_for(
        lambda: len(_decided(w, second["id"])) == 3,
        60,
        "gpusched's decisions of the second model on the master (no replica holds them)",
    )
    written_unacknowledged = [r["id"] for r in w.instances(second["id"]) if r.get("worker_id")]
    failover = fail_over(replicated_redis, w.deployment.keys, frozen)
    w.create_model("qwen2.5-0.5b", replicas=2)  # created while the workers reconnect
    rows = w.running(8, timeout=150)
    assert w.fleet is not None
    starts = w.fleet.starts([r["id"] for r in rows])
    figures: dict[str, Any] = {
        "instances": len(rows),
        "kill_at_s": round(failover.killed_at - began, 1),
        "placements_again_after_s": round(_seconds_until_placed_again(bridge, failover.killed_at), 1),
        "written_before_the_kill_unacknowledged": len(written_unacknowledged),
        "taken_away": dict(failover.taken_away),
        "started": dict(Counter(starts.values())),
        "wall_s": round(time.time() - began, 1),
    }
    print(figures)  # the figures, for the log (docs/gpustack.md quotes them)

    assert failover.taken_away[w.deployment.keys.results] >= 3  # the decisions of the second model
    assert {name: placements(rows)[name] for name in before} == before  # nothing placed twice
    assert len({(r["worker_id"], tuple(r["gpu_indexes"])) for r in rows}) == 8  # one instance a GPU
    assert sorted(starts.values()) == [1] * 8
    assert {r["model_id"] for r in rows} >= {first["id"], second["id"]}
    assert sorted(scheduled_results(w).values()) == [1] * 8
    assert_consistent(w)
    assert not bridge.exited() and len(w.bridges) == 1
    for event in ("gpustack.placement_overwritten", "gpustack.event_failed", "gpustack.write_refused"):
        assert bridge.events(event) == [], event
    assert not w.deployment.redis.exists(w.deployment.keys.data_lost)
    assert written_unacknowledged == []  # the bridge wrote only what a replica held
