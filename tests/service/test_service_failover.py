"""Redis fails over under load: nothing acknowledged is lost, duplicated or overbooked.

Real processes: one master, one replica, three ``redis-sentinel`` processes
(private ports, their own config files), three worker processes; 500
requests with cancels and cluster events (:mod:`service.failover_run`). The
replica's link is paused 1.5 s before the master is SIGKILLed, so the
promoted replica really lacks the master's last writes (the run counts them).
The old master then comes back and the Sentinels make it a replica.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from service.conftest import require_sentinel
from service.failover_run import Plan, Run, cli, cli_together, execute, figures, start_run, stop_run
from service.support import llm_request

pytestmark = pytest.mark.service


def test_a_failover_under_load_loses_duplicates_and_overbooks_nothing_acknowledged(tmp_path: Path) -> None:
    require_sentinel()
    run = start_run(Plan(requests=500, hosts=84), tmp_path)  # 500, on bench_failover's cluster for 500
    try:
        execute(run)
        found = figures(run)
        commands = _cli_after_failover(run)
    finally:
        stop_run(run)
    print(found)  # the figures, for the log
    for args, (code, out) in commands.items():
        assert code == 0, (args, out)
    assert found["taken_away_entries"] and sum(found["taken_away_entries"].values()) > 0  # writes were lost
    assert found["lost"] == [] and found["duplicated"] == [] and found["duplicated_on_stream"] == []
    assert found["terminal_exactly_once"] == found["accepted"]
    assert found["handed_out_then_gone"] == []
    assert found["overbooked"] == 0 and found["booking_violations"] == []
    assert found["ledger_equals_live_placements"]
    assert found["replay_identical"] and found["replayed"] > 0
    assert not found["data_lost_marker"] and found["data_loss_logged"] == 0
    assert found["deciding_refused_logged"] == 0
    assert all(seconds <= 30 for seconds in found["results_again_s"]), found["results_again_s"]


def _cli_after_failover(run: Run) -> dict[str, tuple[int, str]]:
    """The CLI, a process that never saw the old master, through the Sentinels: health, a
    submission it waits for, its description, the cluster, a replay."""
    request = json.dumps(llm_request("cli-after-failover"))
    done = {"submit": cli(run, "submit", "-", "--wait", "--timeout", "60", stdin=request)}
    done.update(cli_together(run, {
        "health": ("health",), "describe": ("describe", "cli-after-failover", "--json"),
        "cluster show": ("cluster", "show"), "replay": ("replay",),
    }))
    assert "replication acknowledged by 1 replica(s)" in done["health"].stdout, done["health"].stdout
    assert json.loads(done["submit"].stdout)["status"] == "scheduled", done["submit"].stdout
    assert json.loads(done["describe"].stdout)["state"] == "done", done["describe"].stdout
    assert " 0 differ" in done["replay"].stdout, done["replay"].stdout
    return {name: (result.returncode, result.stdout + result.stderr) for name, result in done.items()}
