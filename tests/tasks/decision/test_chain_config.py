"""The plugin chain from ``configs/chain.json``: selection, order, scorer override, errors."""

from __future__ import annotations

from typing import Any

import pytest
from service_builders import small_request, uniform_cluster

from tasks.decision.chain_config import ChainConfigError, load_chain, parse_chain
from tasks.testing import Harness


def test_chain_config_selects_and_orders_plugins(tmp_path: Any) -> None:
    loaded = parse_chain(
        {
            "filters": [{"name": "status"}, {"name": "labels", "enabled": False}],
            "strategies": [{"name": "single_worker_single_gpu"}],
            "scorer": "binpack",
        }
    )
    assert [f.name for f in loaded.chain.filters] == ["status"]
    assert [s.name for s in loaded.chain.strategies] == ["single_worker_single_gpu"]
    assert loaded.placement_override == "binpack"
    assert load_chain(tmp_path / "missing.json").spec.name == "gpustack-default"
    for bad, where in [
        ({"filters": [{"name": "nope"}]}, "filters"),
        ({"strategies": [{"name": "single_worker_single_gpu"}] * 2}, "strategies"),
        ({"strategies": [{"name": "single_worker_single_gpu", "enabled": False}]}, "strategies"),
        ({"scorer": "random"}, "scorer"),
    ]:
        with pytest.raises(ChainConfigError, match=where):
            parse_chain(bad)


def test_the_configured_scorer_overrides_the_models_placement_strategy() -> None:
    h = Harness(chain=parse_chain({"scorer": "binpack"}))
    h.apply(uniform_cluster())
    h.submit(small_request("r"))
    h.pump()
    assert h.events(["sched.decision.made"])[0].data["chain"]["scorer"] == "binpack"
