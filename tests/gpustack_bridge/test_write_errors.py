"""GPUStack answers the bridge's writes with 5xx, 409 and 422, end to end.

The bridge reaches GPUStack's own server through :class:`~tests.gpustack_bridge.fault_proxy.FaultProxy`,
which answers chosen writes with an error and forwards everything else (the watches, the lists,
the other writes). What docs/gpustack.md's faults table promises: a 5xx or a 409 is retried until
the write lands (the instance ends placed exactly once, also when the 5xx came after the write
landed); a 422 is reported (``gpustack.write_refused``, ``gpusched_gpustack_write_errors_total``)
and the same body is not sent again, whether it was a placement or the model's evaluation; the
bridge never stops.
"""

from __future__ import annotations

import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tasks.edges.localrun import free_port
from tests.gpustack_bridge.fault_proxy import Fault, FaultProxy, Faults
from tests.gpustack_bridge.scenario import World, assert_consistent, scheduled_results, unique
from tests.gpustack_bridge.synthetic import H100_SPEC

if TYPE_CHECKING:
    from tests.gpustack_bridge.conftest import Servers

pytestmark = [pytest.mark.gpustack, pytest.mark.slow]

#: Each instance's writes, by the model it belongs to: (replicas, the faults of each instance).
PLANS = {
    "unavailable": (2, Faults((Fault(503), Fault(500)))),
    "landed": (1, Faults((Fault(502, forward=True),))),  # the write landed, the bridge was told 502
    "conflict": (1, Faults((Fault(409),))),
    "refused": (1, Faults(then=Fault(422))),  # every write of its instance
}


@pytest.fixture
def fault_proxy(gpustack_servers: Servers) -> Iterator[FaultProxy]:
    """A proxy in front of the place-mode server (the one the plugin switches the scheduler off on);
    requested before ``world``, it stops after the bridge."""
    proxy = FaultProxy(gpustack_servers.started[True].url).start()
    yield proxy
    proxy.stop()


def _counters(port: int, name: str) -> dict[str, float]:
    """The samples of the bridge's counter ``name`` on its ``/metrics``, by their one label's value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        next(iter(sample.labels.values()), ""): sample.value
        for family in text_string_to_metric_families(text)
        if family.name == name
        for sample in family.samples
        if sample.name == f"{name}_total"
    }


def _touch(w: World, row: dict[str, Any]) -> None:
    """Change the instance's ``state_message`` (not part of a placement): the bridge reconciles it."""
    body = {k: row[k] for k in ("source", "local_path", "name", "model_name", "state") if row.get(k)}
    w.server.admin_call("PUT", f"/v2/model-instances/{row['id']}", {**body, "state_message": "touched"})


def test_gpustack_answering_5xx_409_and_422_gets_retried_until_the_write_lands_or_reported_once(
    fault_proxy: FaultProxy, world: Callable[..., World]
) -> None:
    w = world("place")
    w.start_fleet(4, [H100_SPEC, H100_SPEC])  # 8 GPUs; each instance below takes one
    port = free_port()
    metrics = {"GPUSCHED_GPUSTACK_METRICS_PORT": str(port), "GPUSCHED_METRICS_HOST": "127.0.0.1"}
    bridge = w.start_bridge(server=fault_proxy.url, env=metrics)
    names = {key: unique(key) for key in [*PLANS, "evaluation", "barrier"]}
    for key, (_, faults) in PLANS.items():
        fault_proxy.plan(names[key], faults)
    fault_proxy.plan(names["evaluation"], Faults(then=Fault(422)), kind="models")  # its categories
    models = {
        key: w.create_model("qwen2.5-0.5b", replicas=replicas, name=names[key])
        for key, (replicas, _) in {**PLANS, "evaluation": (1, Faults())}.items()
    }
    w.running(5)  # every instance but the refused one
    [refused] = w.instances(models["refused"]["id"])
    assert fault_proxy.statuses(refused["id"]) == [422]
    _touch(w, refused)  # its reconcile comes before the barrier's placement (one watch, in order)
    barrier = w.create_model("qwen2.5-0.5b", replicas=1, name=names["barrier"])
    w.running(6)
    [barrier_row] = w.instances(barrier["id"])
    assert fault_proxy.statuses(barrier_row["id"]) == [200]

    by_model = {key: w.instances(model["id"]) for key, model in models.items()}
    for row in by_model["unavailable"]:
        assert fault_proxy.statuses(row["id"]) == [503, 500, 200]
    [landed] = by_model["landed"]
    assert fault_proxy.statuses(landed["id"])[0] == 502 and set(fault_proxy.statuses(landed["id"])[1:]) <= {
        200
    }
    assert fault_proxy.statuses(by_model["conflict"][0]["id"]) == [409, 200]
    assert fault_proxy.statuses(refused["id"]) == [422]  # not sent again with the same body
    assert fault_proxy.statuses(models["evaluation"]["id"], kind="models") == [422]
    [refused_now] = w.instances(models["refused"]["id"])
    assert refused_now["state"] == "pending" and refused_now["worker_id"] is None
    refusals = bridge.events("gpustack.write_refused")
    assert Counter((e.get("instance"), e.get("model"), e["what"]) for e in refusals) == Counter(
        [(refused["id"], None, "placement"), (None, models["evaluation"]["id"], "evaluation")]
    )  # each reported once
    errors = _counters(port, "gpusched_gpustack_write_errors")
    assert {k: errors.get(k) for k in ("503", "500", "502", "409", "422")} == {
        "503": 2,
        "500": 2,
        "502": 1,
        "409": 1,
        "422": 2,
    }
    assert errors.get("transient", 0) >= 6 and "bug" not in errors  # each 5xx and 409 retried
    placed = [row for rows in by_model.values() for row in rows if row["id"] != refused["id"]]
    assert all(row["state"] == "running" for row in placed)
    assert w.fleet is not None
    started = w.fleet.starts([row["id"] for row in placed])
    assert sorted(started[row["id"]] for row in placed) == [1] * len(placed)  # each placed once
    assert max(scheduled_results(w).values()) == 1 and len(scheduled_results(w)) == 7
    assert_consistent(w, unwritten=[refused["id"]])  # gpusched holds its booking (docs/gpustack.md)
    assert not bridge.exited() and bridge.events("gpustack.event_failed") == []
