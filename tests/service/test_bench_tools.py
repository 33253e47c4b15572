"""The service bench's own tools: its request plans and its result reader.

Both were wrong once: a plan kept its request sizes in blocks for some totals (so a
bench decided hundreds of one size before the next size's first request), and a round
stopped its Redis server under its result reader's blocking read (a traceback at the
end of the round).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from service.conftest import require_redis_server

from tasks.base.settings import Settings
from tasks.edges.localrun import start_redis
from tasks.state.context import redis_client

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_service  # a script of bench/, not a package


def _tp(request: dict[str, Any]) -> int:
    params = request["model"]["backend_parameters"]
    return int(params[1]) if params else 1


@pytest.mark.parametrize("total", [80, 300, 600, 1040, 1500, 2640])
def test_a_plan_interleaves_its_sizes_for_every_total(total: int) -> None:
    """Every size of the mix comes within the first 16 requests, and the sizes keep their
    shares (80 and 2,640 divide 7,920, where a step of 7,919 is -1: the old plan put all of one
    size first)."""
    mix = bench_service.MIXES["mixed"]
    sizes = [_tp(request) for request in bench_service.plan(total, mix, "t")]
    assert set(sizes[:16]) == set(mix)
    counts = Counter(sizes)
    for tp, share in mix.items():
        assert abs(counts[tp] - total * share) <= 1, (tp, counts)
    assert len({request["request_id"] for request in bench_service.plan(total, mix, "t")}) == total


@pytest.mark.service
def test_a_stopped_reader_is_out_of_its_read_before_the_server_goes_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader blocked in XREAD on a real redis-server, stopped as a round stops it, then the
    server stopped: the reader's thread ends without an error (it raised ConnectionError when
    the round only flagged it done and stopped the server at once)."""
    require_redis_server()
    errors: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda hook: errors.append(hook.exc_value))
    server = start_redis(directory=tmp_path / "redis")
    try:
        client = redis_client(Settings(redis_url=server.url), blocking=True)
        reader = bench_service.ResultReader(client, "bench:results")
        reader.start()
        time.sleep(0.3)  # inside its blocking read (200 ms at a time)
        reader.stop()
    finally:
        server.stop()
    time.sleep(0.5)
    assert not reader.is_alive()
    assert errors == []


def test_the_batch_steps_are_read_from_the_workers_batch_finished_lines(tmp_path: Path) -> None:
    """``--steps``: the workers' ``batch_finished`` lines logged after the round began, each
    step's nearest-rank p50 and p99 over them, after the control plane's ``submit_many``."""
    def line(stamp: str, event: str, decide_ms: float) -> str:
        fields = {"event": event, "timestamp": stamp, "decided": 10, "sync_ms": 0.5, "claim_ms": 1.0,
                  "decide_ms": decide_ms, "commit_ms": 4.0}
        return "worker: " + json.dumps(fields)

    (tmp_path / "w0.log").write_text("\n".join([
        line("2026-12-06T10:00:00Z", "batch_finished", 999.0),  # before the round
        line("2026-12-06T10:00:02Z", "batch_finished", 10.0),
        line("2026-12-06T10:00:03Z", "request_finished", 999.0),
        line("2026-12-06T10:00:04Z", "batch_finished", 30.0),
        "not a log line",
    ]))
    (tmp_path / "w1.log").write_text("\n".join([
        line("2026-12-06T10:00:03Z", "batch_finished", 20.0),
        line("2026-12-06T10:00:05Z", "batch_finished", 40.0),
    ]))
    since = datetime(2026, 12, 6, 10, 0, 1, tzinfo=UTC).timestamp()

    steps = bench_service.batch_steps(tmp_path, since, [4.0, 5.0, 6.0])

    assert list(steps) == ["submit_many", "sync", "claim", "decide", "commit"]
    assert steps["decide"] == (20.0, 40.0)  # ranks round(2.5) = 2 and round(4.46) = 4 of 4
    assert steps["submit_many"] == (5.0, 6.0)
    assert steps["sync"] == (0.5, 0.5) and steps["commit"] == (4.0, 4.0)
