"""Shadow mode on a stock GPUStack: its own scheduler places, gpusched decides the same rows and agrees."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest

from tests.gpustack_bridge.scenario import World, wait_for
from tests.gpustack_bridge.server import ROOT
from tests.gpustack_bridge.synthetic import H100_SPEC, L40S_SPEC

pytestmark = [pytest.mark.gpustack, pytest.mark.slow]


def _report(w: World) -> dict[str, object]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tasks.edges.cli",
            "gpustack",
            "report",
            "--cluster-id",
            str(w.cluster_id),
            "--json",
        ],
        env=w.bridge_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    reports = json.loads(out.stdout)
    assert len(reports) == 1
    return dict(reports[0])


def test_shadow_agrees_with_gpustacks_own_scheduler_and_never_writes(world: Callable[..., World]) -> None:
    w = world("shadow", workers=0)
    names = w.add_workers(2, [H100_SPEC] * 4) + w.add_workers(2, [L40S_SPEC] * 2)
    assert w.fleet is not None
    w.fleet.start()
    w.wait_workers_ready(names)
    bridge = w.start_bridge()
    wait_for(lambda: "gpustack.bridge_started" in bridge.log(), 60, "the bridge started")
    w.create_model("qwen2.5-0.5b", replicas=3)
    w.create_model("qwen2.5-7b", replicas=2, params=["--tp-size=2"])
    w.create_model("qwen2.5-32b", replicas=1, params=["--tp-size", "4"])
    rows = w.decided(6, timeout=180)
    assert sum(r["state"] == "running" for r in rows) >= 5  # the tp4 32B may find no 4 free GPUs
    report = wait_for(lambda: (r := _report(w))["decisions"] >= 6 and r, 60, "six shadow decisions")
    assert report["differ"] == 0, json.dumps(report["differences"], indent=1)
    # every placement agreed; GPUStack may decide an instance more than once (the tp4 32B,
    # finding no 4 free GPUs, goes back to pending and is tried again), so there may be more
    assert report["agree"] + report["tie"] >= 6
    assert "gpustack.placed" not in bridge.log()  # shadow mode never writes


def test_place_mode_refuses_a_gpustack_whose_own_scheduler_runs(world: Callable[..., World]) -> None:
    """Two schedulers would race for every instance: the bridge asks the plugin first, and exits 2."""
    w = world("shadow", workers=0)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tasks.edges.cli",
            "gpustack",
            "--server",
            w.server.url,
            "--cluster-id",
            str(w.cluster_id),
            "--mode",
            "place",
        ],
        env=w.bridge_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    [line] = out.stderr.strip().splitlines()
    assert "runs its own scheduler" in line and "GPUSCHED_GPUSTACK_EXTERNAL_SCHEDULER=1" in line
    assert w.api_key not in out.stderr + out.stdout  # the key is never printed
