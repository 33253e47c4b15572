"""Key names: a partition hash-tags every key and queue."""

from __future__ import annotations

from service_builders import small_request, uniform_cluster

from tasks.testing import Harness, isolated_settings


def test_cluster_partitions_hash_tag_every_key() -> None:
    h = Harness(settings=isolated_settings(cluster="c1"))
    h.apply(uniform_cluster())
    h.submit(small_request("r"))
    h.pump()
    keys = h.rt.client.keys("*")
    assert keys and all(key.startswith("gpusched:{c1}:") for key in keys)
    assert h.rt.keys.requests_queue == "gpusched.{c1}.requests"
