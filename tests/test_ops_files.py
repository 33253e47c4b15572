"""The ops files: Prometheus alert rules (``promtool test rules``), its config, the Grafana dashboard.

``promtool`` is Debian's ``prometheus`` package (``tools/test-prereqs.sh``
installs it); these tests skip locally without it and fail in CI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from service_builders import cluster_of, small_request, worker_row

from tasks.flows import metrics
from tasks.testing import Harness

ROOT = Path(__file__).resolve().parents[1]
PROMETHEUS = ROOT / "ops" / "prometheus"
DASHBOARD = ROOT / "ops" / "grafana" / "dashboards" / "gpusched.json"
METRIC = re.compile(r"\bgpusched_[a-z_]+")


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is required in CI (Debian package prometheus; tools/test-prereqs.sh)")
        pytest.skip("promtool is not installed (Debian package prometheus)")
    return found


def test_the_alert_rules_pass_their_promtool_unit_tests() -> None:
    promtool = _promtool()
    checked = subprocess.run([promtool, "check", "rules", "alerts.yml"], cwd=PROMETHEUS,
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([promtool, "test", "rules", "alerts_test.yml"], cwd=PROMETHEUS,
                            capture_output=True, text=True, timeout=120)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    alerts = set(re.findall(r"alert: (\w+)", (PROMETHEUS / "alerts.yml").read_text()))
    assert alerts == {"GpuschedNoWorkerAlive", "GpuschedDataLost", "GpuschedRedisDown",
                      "GpuschedParkedGrowing", "GpuschedDeadLetters", "GpuschedOverbooked",
                      "GpuschedHeartbeatStale", "GpuschedDrainerStale", "GpuschedReschedulingSuspended"}
    tested_alerts = set(re.findall(r"alertname: (\w+)", (PROMETHEUS / "alerts_test.yml").read_text()))
    assert tested_alerts == alerts  # every rule has a test


def test_the_prometheus_config_is_valid(tmp_path: Path) -> None:
    promtool = _promtool()
    shutil.copy(PROMETHEUS / "alerts.yml", tmp_path / "alerts.yml")
    config = (PROMETHEUS / "prometheus.yml").read_text().replace("/etc/prometheus/alerts.yml", "alerts.yml")
    (tmp_path / "prometheus.yml").write_text(config)
    checked = subprocess.run([promtool, "check", "config", "prometheus.yml"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _served() -> set[str]:
    """Every metric name a worker node's /metrics serves (state, node-local and domain metrics)."""
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a", 2)))
    h.submit(small_request("r"))
    h.pump()
    metrics.count_dead_letter("task_error")
    families = [*metrics.state_families(h.rt), *metrics.node_families()]
    names = {family.name for family in families} | {s.name for family in families for s in family.samples}
    names.add("gpusched_drainer_age_seconds")  # only once a drainer pass finished on the node
    from prometheus_client import REGISTRY

    names |= {sample.name for family in REGISTRY.collect() if family.name.startswith("gpusched_")
              for sample in family.samples}
    return names | {"gpusched_redis_up"}


def test_every_metric_the_ops_files_query_is_one_a_node_serves() -> None:
    served = _served()
    dashboard = json.loads(DASHBOARD.read_text())
    queried = {name for panel in dashboard["panels"] for target in panel["targets"]
               for name in METRIC.findall(target["expr"])}
    queried |= set(METRIC.findall((PROMETHEUS / "alerts.yml").read_text()))
    assert queried and queried <= served, sorted(queried - served)
    assert all(panel["datasource"]["uid"] == "gpusched-prometheus" for panel in dashboard["panels"])
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
