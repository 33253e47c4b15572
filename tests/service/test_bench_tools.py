"""The service bench's own tools: its request plans and its result reader.

Both were wrong once: a plan kept its request sizes in blocks for some totals (so a
bench decided hundreds of one size before the next size's first request), and a round
stopped its Redis server under its result reader's blocking read (a traceback at the
end of the round).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
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
