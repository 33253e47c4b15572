"""Place mode against GPUStack's own server (its scheduler switched off by the gpusched plugin)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.gpustack_bridge.scenario import World, gpus_over_total
from tests.gpustack_bridge.synthetic import H100_SPEC

pytestmark = [pytest.mark.gpustack, pytest.mark.slow]


def test_a_pending_instance_is_placed_by_gpusched_and_written_as_gpustack_writes_it(
    world: Callable[..., World],
) -> None:
    w = world("place")
    names = w.add_workers(2, [H100_SPEC, H100_SPEC])
    assert w.fleet is not None
    w.fleet.start()
    w.wait_workers_ready(names)
    w.start_bridge()
    model = w.create_model("qwen2.5-0.5b", replicas=2)
    rows = w.running(2)
    assert {r["worker_name"] for r in rows} <= set(names)
    for row in rows:
        assert row["distributed_servers"]["mode"] == "initialize_later"
        assert row["computed_resource_claim"]["vram_utilization"] is not None
    assert gpus_over_total(w.server, w.cluster_id) == []
    models = {m["id"]: m for m in w.rows("models")}
    assert models[model["id"]]["categories"] == ["llm"]


def test_an_instance_gpustack_placed_itself_is_gpuscheds_control_plane_instance_and_never_counted_twice(
    world: Callable[..., World],
) -> None:
    """An instance placed before the bridge ran (by hand, or by GPUStack before the switch) holds its GPU
    in gpusched's cluster; instances gpusched placed are its own bookings and never listed again."""
    w = world("place")
    [name] = w.add_workers(1, [H100_SPEC, H100_SPEC])
    assert w.fleet is not None
    w.fleet.start()
    w.wait_workers_ready([name])
    first = w.create_model("qwen2.5-0.5b", replicas=1)
    [row] = w.wait_instances(lambda rows: len(rows) == 1, "the first instance created")
    worker = next(r for r in w.rows("workers") if r["name"] == name)
    claim = {"vram": {"1": 72_000_000_000}, "ram": None, "vram_utilization": 0.84}
    w.server.admin_call(
        "PUT",
        f"/v2/model-instances/{row['id']}",
        {
            "source": "local_path",
            "local_path": first["local_path"],
            "name": row["name"],
            "model_name": row["model_name"],
            "state": "scheduled",
            "worker_id": worker["id"],
            "worker_name": name,
            "worker_ip": "127.0.0.1",
            "gpu_type": "cuda",
            "gpu_indexes": [1],
            "computed_resource_claim": claim,
        },
    )
    w.start_bridge()
    w.create_model("qwen2.5-0.5b", replicas=1)
    rows = w.running(2)
    mine = next(r for r in rows if r["id"] != row["id"])
    assert mine["gpu_indexes"] == [0]  # GPU 1 is held by the instance gpusched did not place
    from tasks.edges.gpustack_bridge.ids import instance_of

    held = w.deployment.client.rt.cluster.instance_meta()
    assert sorted((meta.source, key) for key, meta in held.items() if meta.source == "snapshot") == [
        ("snapshot", f"id:{row['id']}")
    ]  # GPUStack's own instance, as the control plane's
    booked = [
        instance_of(meta.request_id or "", w.cluster_id)
        for meta in held.values()
        if meta.source == "gpusched"
    ]
    assert booked == [mine["id"]]  # gpusched's placement: its booking only, not listed a second time
    w.deployment.assert_ledger_consistent()
    assert gpus_over_total(w.server, w.cluster_id) == []
