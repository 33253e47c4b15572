"""The cold path's worker views: checked once over the cluster, row by row only on a failure.

:func:`scheduler_core.workers.checked_views` must give exactly the views
:func:`~scheduler_core.workers.worker_view` gives row by row, and must step
aside (None) whenever a row-by-row check could fail or name a field, so that
every rejection stays the one the row-by-row walk reports.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_core import ScheduleRequest, SnapshotMemo, Worker, schedule
from scheduler_core.workers import checked_views, worker_view
from tests.builders import GIB, H100, MI300X, RTX_4090, gpu, model, worker


def _rows() -> list[dict[str, Any]]:
    mixed = worker(3, "mixed", [gpu(0, H100), gpu(1, H100), gpu(0, MI300X, type_="rocm", vendor="amd")])
    unified = worker(4, "unified", [gpu(0, 16 * GIB, name="Apple M2")])
    unified["status"]["memory"]["is_unified_memory"] = True
    return [
        worker(1, "a", [gpu(i, RTX_4090) for i in range(4)], reserved_vram=GIB, reserved_ram=2 * GIB),
        worker(2, "b", [gpu(0, H100), {"name": "no index", "type": "cuda", "memory": {"total": H100}}]),
        mixed,
        unified,
        worker(5, "cpu-only", []),
    ]


def _workers(rows: list[dict[str, Any]]) -> list[Worker]:
    return [Worker.model_validate(row) for row in rows]


def test_the_views_are_the_row_by_row_views() -> None:
    rows = _rows()
    rows[2]["status"]["gpu_devices"].pop()  # a repeated index across types makes it step aside
    workers = _workers(rows)
    assert checked_views(workers) == [worker_view(w) for w in workers]


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda rows: rows[1].update(id=1), id="duplicate id"),
        pytest.param(lambda rows: rows[1].update(name="a"), id="duplicate name"),
        pytest.param(
            lambda rows: rows[0]["status"]["gpu_devices"].append(gpu(2, RTX_4090)), id="duplicate GPU"
        ),
        pytest.param(lambda rows: None, id="index repeated across types"),
        pytest.param(lambda rows: rows[0].update(name="节点-a"), id="non-ASCII name"),
        pytest.param(lambda rows: rows[0].update(ip="10.0.0.\ud800"), id="lone surrogate"),
        pytest.param(
            lambda rows: rows[1]["status"]["gpu_devices"][0].update(name="Ｈ100"), id="non-ASCII GPU name"
        ),
    ],
)
def test_any_possible_failure_steps_aside(change: Any) -> None:
    rows = _rows()
    change(rows)
    assert checked_views(_workers(rows)) is None


def test_a_row_that_fails_is_named_as_row_by_row() -> None:
    rows = _rows()
    rows[1]["status"]["gpu_devices"][0]["type"] = "cu\udc80da"
    result = schedule({"model": model(), "workers": rows})
    assert result.status == "rejected"
    assert result.error is not None
    assert result.error.field == "workers.1.status.gpu_devices.0.type"


def test_valid_non_ascii_and_repeats_across_types_still_place() -> None:
    rows = _rows()
    rows[2]["name"] = "节点-mixed"
    request = {"request_id": "r", "model": model(), "workers": rows}
    result = schedule(request)
    assert result.status == "scheduled"
    assert "节点-mixed" in {c.worker_name for c in result.candidates}
    # A memo checks row by row (SnapshotMemo.view_of): the same decision.
    assert schedule(ScheduleRequest.model_validate(request), memo=SnapshotMemo()) == result
