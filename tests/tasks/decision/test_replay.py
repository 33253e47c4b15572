"""Replay: a whole history replays identically; a tampered decision shows as a diff."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from builders import GIB, RTX_4090, uniform_worker
from service_builders import small_request, uniform_cluster

from tasks.decision.replay import ReplayError, ReplayReport, format_report, replay
from tasks.testing import Harness


def _busy_history() -> Harness:
    h = Harness()
    h.apply(uniform_cluster(workers=2, gpus=2))
    for n in range(6):
        h.submit(small_request(f"r{n}"))
    h.pump()
    h.event({"kind": "instance_deleted", "request_id": "r0"})
    h.event({"kind": "worker_added", "worker": uniform_worker(3, "w3", 1, RTX_4090)})
    h.pump()
    h.event({"kind": "worker_removed", "worker_id": 1})
    h.pump()
    return h


def test_replay_of_a_whole_history_is_identical() -> None:
    h = _busy_history()
    report = replay(h.rt.client, h.rt.cluster)
    assert report.replayed == len(h.events(["sched.decision.made"])) > 6
    assert (report.differ, report.skipped) == (0, [])
    expected = f"{report.replayed} replayed, {report.replayed} identical, 0 differ"
    assert format_report(report).splitlines()[0] == expected


def test_replay_filters_by_request_and_position() -> None:
    h = _busy_history()
    assert replay(h.rt.client, h.rt.cluster, request_id="r5").replayed == 2
    decisions = h.events(["sched.decision.made"])
    since = replay(h.rt.client, h.rt.cluster, since=decisions[-2].stream_id)
    assert since.replayed == 2 and since.identical == 2


def _forge(h: Harness, target: Any) -> None:
    """Log a copy of ``target`` whose digest and selected candidate were changed."""
    data = dict(target.data)
    data["result_digest"] = "0" * 64
    data["outcome"] = {**data["outcome"], "selected": 99}
    h.rt.client.xadd(
        h.rt.keys.events,
        {
            "schema_version": "1",
            "type": "sched.decision.made",
            "event_id": "forged",
            "time": target.time,
            "source": "test",
            "request_id": target.request_id or "",
            "cluster_version": str(target.cluster_version),
            "data": json.dumps(data),
        },
    )


def test_replay_reports_a_tampered_decision_with_a_diff() -> None:
    h = _busy_history()
    _forge(h, h.events(["sched.decision.made"])[0])
    report = replay(h.rt.client, h.rt.cluster)
    assert report.differ == 1
    assert any(line.startswith("-") and "99" in line for line in report.differences[0].diff)
    assert "1 differ" in format_report(report).splitlines()[0]


def test_replay_skips_decisions_whose_snapshot_is_gone() -> None:
    h = _busy_history()
    for key in h.rt.client.keys(h.rt.keys.snapshot("*")):
        h.rt.client.delete(key)
    report = replay(h.rt.client, h.rt.cluster)
    assert report.replayed == 0 and report.skipped


def test_replay_uses_the_request_as_received_before_each_decision() -> None:
    h = Harness()
    h.apply(uniform_cluster(workers=1, gpus=2))
    h.submit(small_request("r"))
    h.pump()
    h.event({"kind": "instance_deleted", "request_id": "r"})
    h.rt.client.delete(h.rt.keys.request("r"))  # request_ttl_s elapsed: the id is free again
    h.submit(small_request("r", env={"GPUSTACK_MODEL_VRAM_CLAIM": str(12 * GIB)}))
    h.pump()
    report = replay(h.rt.client, h.rt.cluster)
    assert (report.replayed, report.identical, report.differ) == (2, 2, 0)


def test_replay_reports_progress_while_reading_and_replaying(monkeypatch: pytest.MonkeyPatch) -> None:
    import tasks.decision.replay as replay_module

    monkeypatch.setattr(replay_module, "PROGRESS_EVERY", 5)
    monkeypatch.setattr(replay_module, "PROGRESS_SECONDS", 1e9)  # counts only, whatever the speed
    h = _busy_history()
    seen: list[tuple[str, int]] = []
    report = replay(h.rt.client, h.rt.cluster, progress=lambda phase, done: seen.append((phase, done)))
    events = h.rt.client.xlen(h.rt.keys.events)
    assert [done for phase, done in seen if phase == "read"] == list(range(5, events + 1, 5))
    assert [done for phase, done in seen if phase == "replayed"] == list(range(5, report.replayed + 1, 5))


def test_a_decision_recorded_before_results_carried_failures_replays_identical() -> None:
    """Results gained the additive ``failures`` field (issue 21): an audit log an older gpusched
    wrote holds the digest of the same result without it, and no ``failures`` in its outcome.
    Replay accepts exactly that; a log that has the key is held to the whole digest."""
    from scheduler_core import schedule
    from tasks.base.digests import result_digest
    from tasks.decision.replay import recorded_before_failures

    h = Harness()
    h.apply(uniform_cluster(workers=1, gpus=1))
    h.submit(small_request("huge", env={"GPUSTACK_MODEL_VRAM_CLAIM": str(200 * GIB)}))
    h.pump()
    (decision,) = h.events(["sched.decision.made"])
    assert decision.data["outcome"]["failures"]  # an unschedulable decision names who failed
    request = {**small_request("huge", env={"GPUSTACK_MODEL_VRAM_CLAIM": str(200 * GIB)}),
               **uniform_cluster(workers=1, gpus=1)}
    result = schedule(request)
    assert result.failures
    _, without = result_digest(result.model_copy(update={"failures": None}))
    old = {"result_digest": without, "outcome": {k: v for k, v in decision.data["outcome"].items()
                                                 if k != "failures"}}
    assert recorded_before_failures(old, result)
    assert not recorded_before_failures({**old, "outcome": decision.data["outcome"]}, result)
    assert not recorded_before_failures({**old, "result_digest": "0" * 64}, result)


def _report_parts(report: ReplayReport) -> tuple[object, ...]:
    return report.replayed, report.identical, report.differences, report.skipped, report.start_version


@pytest.mark.parametrize("processes", [2, 3, 50])
def test_replay_in_processes_reports_what_one_process_does(processes: int) -> None:
    """Each process takes a run of consecutive versions with its own memo; joined in order,
    the reports are the serial one, a tampered decision's diff included (more processes than
    versions with decisions: the extra ones are never started)."""
    h = _busy_history()
    _forge(h, h.events(["sched.decision.made"])[-1])
    serial = replay(h.rt.client, h.rt.cluster, processes=1)
    assert serial.differ == 1 and serial.replayed > 6
    assert _report_parts(replay(h.rt.client, h.rt.cluster, processes=processes)) == _report_parts(serial)


def test_replay_in_processes_skips_what_one_process_skips() -> None:
    """The fold's own failures (a snapshot gone) are reported once, after the segments'."""
    h = _busy_history()
    h.submit(small_request("late"))
    h.pump()
    for key in h.rt.client.keys(h.rt.keys.snapshot("*")):
        h.rt.client.delete(key)
    serial = replay(h.rt.client, h.rt.cluster, processes=1)
    assert serial.skipped and serial.replayed == 0
    assert _report_parts(replay(h.rt.client, h.rt.cluster, processes=2)) == _report_parts(serial)


def test_replay_in_processes_reports_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    import tasks.decision.replay as replay_module

    monkeypatch.setattr(replay_module, "PROGRESS_EVERY", 5)
    monkeypatch.setattr(replay_module, "PROGRESS_SECONDS", 1e9)
    monkeypatch.setattr(replay_module, "CHILD_PROGRESS_EVERY", 1)
    h = _busy_history()
    seen: list[tuple[str, int]] = []
    report = replay(h.rt.client, h.rt.cluster, processes=2, progress=lambda p, n: seen.append((p, n)))
    assert [done for phase, done in seen if phase == "replayed"] == list(range(5, report.replayed + 1, 5))


def test_a_failing_replay_process_fails_the_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    import tasks.decision.replay as replay_module

    def broken(*args: object) -> None:
        raise RuntimeError("core exploded")

    monkeypatch.setattr(replay_module, "_replay_one", broken)
    h = _busy_history()
    with pytest.raises(ReplayError, match="core exploded"):
        replay(h.rt.client, h.rt.cluster, processes=2)


def test_a_long_log_replays_in_several_processes_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    from tasks.decision.replay import _process_count

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert _process_count(None, 999) == 1
    assert _process_count(None, 1000) == 2
    assert _process_count(1, 100_000) == 1
    assert _process_count(3, 10) == 3


@pytest.mark.parametrize("page", [1, 2, 7])
def test_paged_reading_of_the_log_is_reading_it_whole(page: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages of any size (a page boundary between a decision and its request, its booking or
    the change before it) read the same entries, and the replay reports the same."""
    import tasks.decision.replay as replay_module
    from tasks.state.streams import iter_stream

    h = _busy_history()
    whole = [(str(i), dict(f)) for i, f in h.rt.client.xrange(h.rt.keys.events)]
    assert list(iter_stream(h.rt.client, h.rt.keys.events, page=page)) == whole
    expected = _report_parts(replay(h.rt.client, h.rt.cluster, processes=1))
    monkeypatch.setattr(replay_module, "PAGE", page)
    assert _report_parts(replay(h.rt.client, h.rt.cluster, processes=1)) == expected
    assert _report_parts(replay(h.rt.client, h.rt.cluster, processes=2)) == expected
