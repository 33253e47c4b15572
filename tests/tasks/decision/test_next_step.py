"""From the core's result to the next step: an overcommitted pick parks, it is never booked."""

from __future__ import annotations

import json

from builders import GIB, RTX_4090, instance, model, uniform_worker

from tasks.decision.notices import OVERCOMMIT_MESSAGE
from tasks.testing import Harness


def test_overcommitted_manual_picks_are_never_booked() -> None:
    h = Harness()
    busy = instance(7, 1, {0: RTX_4090 - GIB})
    h.apply({"workers": [uniform_worker(1, "w1", 1, RTX_4090)], "model_instances": [busy]})
    h.submit({"request_id": "m", "model": model(gpu_selector={"gpu_ids": ["w1:cuda:0"]})})
    h.pump()
    (notice,) = h.results()
    assert notice["status"] == "unschedulable"
    assert OVERCOMMIT_MESSAGE in json.loads(notice["result"])["messages"]
    assert h.rt.cluster.ledger()[1] == {"1:cuda:0": RTX_4090 - GIB}
