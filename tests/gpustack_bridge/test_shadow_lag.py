"""Shadow mode when the bridge's mirror is behind GPUStack on a worker (on fakeredis).

Workers and instances come on two watch streams: GPUStack's scheduler may decide on a worker
update (a lost heartbeat: ``not_ready``) that reaches the mirror after the decision. Two
workers of two H100s each, one instance already on worker 2's first GPU: on the mirror's rows (both
ready) spread picks worker 1; GPUStack, which holds worker 1 ``not_ready``, picks worker 2's
free GPU.
The bridge reads the workers again before counting a difference; GPUStack's side here is
what gpusched decides on GPUStack's rows (the test is of the re-read, not of placement,
which ``test_shadow.py`` and ``test_fifty.py`` check against GPUStack's own code).
"""

from __future__ import annotations

import json
from typing import Any

import fakeredis
import pytest

from scheduler_core import schedule
from tasks.base.keys import Keys
from tasks.edges.gpustack_bridge import writeback
from tasks.edges.gpustack_bridge.api import GpustackError, WatchEvent
from tasks.edges.gpustack_bridge.keys import BridgeKeys
from tasks.edges.gpustack_bridge.rows import claims_view, worker_row
from tasks.edges.gpustack_bridge.shadow import AGREE, DIFFER, Shadow, report
from tests.builders import H100, gpu, model, weight_for_estimate, worker

CLUSTER = 1
MODEL = model(id=1, name="m", weight_bytes=weight_for_estimate(14))
RUNNING = {  # another model's instance on worker 2's GPU
    "id": 5, "name": "other-5", "model_id": 2, "state": "running", "worker_id": 2, "gpu_type": "cuda",
    "gpu_indexes": [0], "computed_resource_claim": {"vram": {"0": 20 << 30}},
}
PLACED = {"id": 7, "name": "m-7", "model_id": 1, "cluster_id": CLUSTER, "state": "analyzing"}


class _Api:
    """GPUStack's API as the shadow reads it: the workers now; the model row unread (the
    shadow then takes the mirror's)."""

    def __init__(self, workers: list[dict[str, Any]] | None) -> None:
        self.workers = workers
        self.listed = 0

    def list_rows(self, kind: str, **params: Any) -> list[dict[str, Any]]:
        assert kind == "workers"
        self.listed += 1
        if self.workers is None:
            raise GpustackError("GET /v2/workers: connection refused")
        return self.workers

    def get_row(self, kind: str, row_id: int) -> dict[str, Any] | None:
        raise GpustackError("not served here")


def _workers(first_state: str) -> list[dict[str, Any]]:
    return [
        worker(1, "w1", [gpu(0, H100), gpu(1, H100)], state=first_state, cluster_id=CLUSTER),
        worker(2, "w2", [gpu(0, H100), gpu(1, H100)], cluster_id=CLUSTER),
    ]


def _shadow(api: _Api) -> tuple[Shadow, fakeredis.FakeRedis]:
    client = fakeredis.FakeRedis(decode_responses=True)
    rows: dict[str, dict[int, dict[str, Any]]] = {
        "workers": {row["id"]: worker_row(row) for row in _workers("ready")},  # the mirror: behind
        "models": {1: MODEL},
        "model-instances": {5: RUNNING, 7: PLACED},
    }
    keys = BridgeKeys(Keys(), CLUSTER)
    return Shadow(rows, CLUSTER, client, keys, (), api), client  # type: ignore[arg-type]


def _gpustacks_decision(state_of_worker_1: str) -> dict[str, Any]:
    """The instance row GPUStack writes: the placement decided on its rows."""
    request = {
        "request_id": "gpustack", "policy": "gpustack", "model": MODEL,
        "workers": [worker_row(row) for row in _workers(state_of_worker_1)],
        "model_instances": [claims_view(RUNNING), claims_view(PLACED)],
    }
    result = json.loads(schedule(request).model_dump_json())
    assert result["status"] == "scheduled", result
    chosen = writeback.chosen(result)
    return {
        **PLACED, "state": "scheduled", "worker_id": chosen["worker_id"], "gpu_type": chosen["gpu_type"],
        "gpu_indexes": chosen["gpu_indexes"], "computed_resource_claim": chosen["computed_resource_claim"],
    }


def _entry(client: fakeredis.FakeRedis, shadow: Shadow) -> dict[str, str]:
    (_, fields), = client.xrange(shadow.keys.shadow)
    return fields


def test_a_difference_from_a_worker_the_mirror_had_not_caught_up_on_is_decided_again() -> None:
    after = _gpustacks_decision("not_ready")
    assert (after["worker_id"], after["gpu_indexes"]) == (2, [1])  # GPUStack could not use worker 1
    api = _Api(_workers("not_ready"))
    shadow, client = _shadow(api)
    assert shadow.observe(PLACED, WatchEvent(2, after, {})) == AGREE
    entry = _entry(client, shadow)
    assert entry["verdict"] == AGREE and entry["reread"] == "workers"
    assert json.loads(entry["stale_workers"]) == [1] and json.loads(entry["fields"]) == []
    assert json.loads(entry["gpusched"])["placement"]["worker_id"] == 2
    counted = report(client, shadow.keys, 5)
    assert (counted["agree"], counted["differ"], counted["reread"], counted["differences"]) == (1, 0, 1, [])


@pytest.mark.parametrize("listed", [_workers("ready"), None], ids=["same-workers", "api-unreachable"])
def test_a_difference_stays_when_gpustacks_workers_are_the_mirrors_or_unreadable(
    listed: list[dict[str, Any]] | None,
) -> None:
    """GPUStack's workers are the mirror's (or cannot be read): nothing explains the
    difference, and it is counted as one, with the first comparison and no re-read mark."""
    after = _gpustacks_decision("not_ready")
    api = _Api(listed)
    shadow, client = _shadow(api)
    assert shadow.observe(PLACED, WatchEvent(2, after, {})) == DIFFER
    entry = _entry(client, shadow)
    assert api.listed == 1 and "reread" not in entry and "stale_workers" not in entry
    assert "placement.worker_id" in json.loads(entry["fields"])
    assert json.loads(entry["gpusched"])["placement"]["worker_id"] == 1
    counted = report(client, shadow.keys, 5)
    assert (counted["differ"], counted["reread"], len(counted["differences"])) == (1, 0, 1)


def test_a_difference_the_fresh_workers_do_not_explain_stays_a_difference() -> None:
    """Worker 1 is ``not_ready`` on GPUStack's side now, but GPUStack placed the instance on
    a GPU gpusched never chooses on either rows (worker 2's, with the other claim): still a
    difference, recorded as first compared."""
    after = {**_gpustacks_decision("not_ready"), "computed_resource_claim": {"vram": {"0": 1 << 30}}}
    api = _Api(_workers("not_ready"))
    shadow, client = _shadow(api)
    assert shadow.observe(PLACED, WatchEvent(2, after, {})) == DIFFER
    entry = _entry(client, shadow)
    assert "reread" not in entry and json.loads(entry["gpusched"])["placement"]["worker_id"] == 1


def test_an_agreement_reads_no_workers() -> None:
    after = _gpustacks_decision("ready")
    api = _Api(_workers("not_ready"))
    shadow, client = _shadow(api)
    assert shadow.observe(PLACED, WatchEvent(2, after, {})) == AGREE
    assert api.listed == 0 and "reread" not in _entry(client, shadow)
