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
