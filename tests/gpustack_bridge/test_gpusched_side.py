"""What the bridge reads of gpusched (:mod:`tasks.edges.gpustack_bridge.gpusched_side`) on fakeredis:
with replicas required, a result or notice is acted on only once a replica acknowledged it
(``tests/gpustack_bridge/test_redis_failover.py`` is the failover that shows why)."""

from __future__ import annotations

from service_builders import small_request, uniform_cluster

from tasks.edges.client import ServiceClient
from tasks.edges.gpustack_bridge.gpusched_side import GpuschedSide
from tasks.testing import Harness, isolated_settings


def _side(h: Harness) -> GpuschedSide:
    client = ServiceClient.__new__(ServiceClient)  # the harness's runtime, no broker
    client.rt = h.rt
    return GpuschedSide(client)


def test_a_placement_no_replica_holds_is_unacknowledged_until_one_does() -> None:
    h = Harness(settings=isolated_settings(min_replicas_acked=1))
    h.apply(uniform_cluster())
    h.submit(small_request("a"))
    h.pump()
    side = _side(h)
    assert h.record("a")["state"] == "done"
    assert side.desired("a").kind == "unacknowledged"
    h.acknowledge()
    placed = side.desired("a")
    assert placed.kind == "placed" and placed.result is not None and placed.result["status"] == "scheduled"


def test_an_unschedulable_notice_no_replica_holds_is_unacknowledged_until_one_does() -> None:
    h = Harness(settings=isolated_settings(min_replicas_acked=1))
    h.apply(uniform_cluster(workers=1, gpus=1))
    h.submit(small_request("big", env={"GPUSTACK_MODEL_VRAM_CLAIM": str(100 << 30)}))  # > a 4090's 24 GiB
    h.pump()
    side = _side(h)
    assert side.desired("big").kind == "unacknowledged"
    h.acknowledge()
    notice = side.desired("big")
    assert notice.kind == "unschedulable" and notice.result is not None


def test_without_replicas_required_a_placement_is_acted_on_at_once() -> None:
    h = Harness()
    h.apply(uniform_cluster())
    h.submit(small_request("a"))
    h.pump()
    assert _side(h).desired("a").kind == "placed"
