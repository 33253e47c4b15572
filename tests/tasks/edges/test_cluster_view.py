"""``gpusched cluster show``: per-worker and per-GPU memory, markers, filters, the parked queue."""

from __future__ import annotations

import pytest
from builders import GIB, H100, RTX_4090, gpu, worker
from service_builders import cluster_of, small_request, worker_row

from tasks.edges.cli_operate import WORKER_ORDERS
from tasks.edges.cluster_view import Filters, arrange, cluster_view, render_cluster, sort_workers
from tasks.testing import Harness

TWENTY_GIB = {"GPUSTACK_MODEL_VRAM_CLAIM": str(20 * GIB)}


def _cluster() -> Harness:
    h = Harness()
    h.apply(cluster_of(
        worker_row(1, "node-a", count=2, reserved_vram=GIB),
        worker(2, "node-b", [gpu(0, H100, name="H100")]),
        worker_row(3, "other", state="unreachable"),
    ))
    h.submit(small_request("placed", env=TWENTY_GIB, worker_selector={"os": "linux"}))
    h.submit(small_request("wait-1", worker_selector={"gpu": "nowhere"}))
    h.submit(small_request("wait-2", worker_selector={"gpu": "nowhere"}))
    h.pump()
    return h


def test_each_gpu_shows_total_allocatable_booked_and_free() -> None:
    h = _cluster()
    view = cluster_view(h.rt)
    by_id = {w["id"]: w for w in view["workers"]}
    assert [w["id"] for w in view["workers"]] == [1, 2, 3]
    a0 = by_id[1]["gpus"][0]
    assert (a0["total"], a0["allocatable"]) == (RTX_4090, RTX_4090 - GIB)  # reserved VRAM is not bookable
    ((key, claim),) = h.rt.cluster.claims()["req:placed"].items()
    booked = [g for w in view["workers"] for g in w["gpus"] if g["booked"]]
    free = booked[0]["allocatable"] - claim
    assert [(g["key"], g["booked"], g["free"]) for g in booked] == [(key, claim, free)]
    assert view["summary"] == {
        "workers": 3, "ready": 2, "not_ready": 1, "gpus": 4, "overbooked_gpus": 0,
        "total": 3 * RTX_4090 + H100, "allocatable": 3 * RTX_4090 + H100 - 2 * GIB, "booked": claim,
        "free": 3 * RTX_4090 + H100 - 2 * GIB - claim,
    }
    assert view["parked"] == [
        {"reason": "label_mismatch", "count": 2, "oldest_s": 0, "examples": ["wait-1", "wait-2"]}
    ]


def test_not_ready_workers_are_marked_with_their_outage_and_filters_narrow_the_view() -> None:
    h = _cluster()
    h.clock.advance(300)
    view = cluster_view(h.rt)
    text = render_cluster(view, width=100)
    assert "!other" in text and "unreachable for 5m" in text
    assert [w["id"] for w in cluster_view(h.rt, Filters(worker="node-*"))["workers"]] == [1, 2]
    assert [w["id"] for w in cluster_view(h.rt, Filters(worker="2"))["workers"]] == [2]
    assert [w["id"] for w in cluster_view(h.rt, Filters(gpu_type="h100"))["workers"]] == [2]
    assert [w["id"] for w in cluster_view(h.rt, Filters(state="down"))["workers"]] == [3]
    assert cluster_view(h.rt, Filters(gpu_type="rocm"))["summary"]["gpus"] == 0


def test_sorting_and_a_limit_keep_two_thousand_workers_on_one_screen_width() -> None:
    h = Harness()
    h.apply(cluster_of(*(worker_row(w, f"worker-with-a-rather-long-name-{w:04d}", count=8)
                         for w in range(1, 2001))))
    view = cluster_view(h.rt)
    assert view["summary"]["gpus"] == 16_000
    text = render_cluster(view, gpus=False, width=100)
    lines = text.splitlines()
    assert all(len(line) <= 100 for line in lines)
    assert sum(1 for line in lines if "8xcuda" in line) == 2000  # one line per worker, nothing wraps
    limited = render_cluster(view, sort="name", limit=10, width=100).splitlines()
    assert sum(1 for line in limited if "8xcuda" in line) == 10
    assert any("1990 more workers" in line for line in limited)
    per_gpu = render_cluster(view, gpus=True, limit=1, width=100).splitlines()
    assert sum(1 for line in per_gpu if "cuda:" in line) == 8


def test_every_cli_sort_order_is_known() -> None:
    workers = [{"id": 2, "name": "b", "free": 1, "booked": 5, "state": "ready"},
               {"id": 1, "name": "c", "free": 9, "booked": 0, "state": "unreachable"}]
    assert [[w["id"] for w in sort_workers(workers, order)] for order in WORKER_ORDERS] == [
        [1, 2], [2, 1], [1, 2], [2, 1], [1, 2],
    ]


def test_arrange_orders_and_cuts_the_json_workers_and_keeps_the_summary_of_all() -> None:
    view = cluster_view(_cluster().rt)
    ordered = arrange(view, "state", 2)
    assert [w["id"] for w in ordered["workers"]] == [3, 1]  # not ready first, then by id
    assert ordered["summary"] == view["summary"] and ordered["parked"] == view["parked"]
    assert arrange(view, "id", 0)["workers"] == []
    assert [w["id"] for w in arrange(view)["workers"]] == [1, 2, 3]
    with pytest.raises(ValueError, match="limit must be 0 or more"):
        arrange(view, "id", -1)


def test_holders_name_what_holds_each_gpu_and_outside_usage_is_what_is_used_beyond_the_bookings() -> None:
    h = Harness()
    row = worker_row(1, "h100-a", 2)
    row["status"]["gpu_devices"][1]["memory"]["used"] = 5 * (1 << 30)  # 5 GiB used by something else
    h.apply(cluster_of(row))
    h.submit(small_request("holder"))
    h.pump()
    view = cluster_view(h.rt, holders=True)
    gpus = {g["index"]: g for g in view["workers"][0]["gpus"]}
    held = [g for g in gpus.values() if g.get("holders")]
    assert len(held) == 1 and held[0]["holders"][0]["request_id"] == "holder"
    assert held[0]["holders"][0]["bytes"] == held[0]["booked"] > 0
    assert held[0]["holders"][0]["instance"] == "req:holder"
    assert gpus[1]["outside"] == max(5 * (1 << 30) - gpus[1]["booked"], 0)
    text = render_cluster(view, holders=True, width=200)
    assert f"holder {held[0]['booked'] / (1 << 30):.1f}" in text
    assert view["rescheduling"] == {"suspended": False}
    h.rt.client.set(h.rt.keys.reschedule_suspended,
                    '{"down": 3, "vanished": 0, "workers": 4, "max_unreachable_fraction": 0.5}')
    suspended = cluster_view(h.rt)
    assert suspended["rescheduling"]["suspended"] is True
    text = render_cluster(suspended, width=200)
    assert "Rescheduling SUSPENDED: 3 down and 0 vanished of 4 workers" in text


def test_the_label_filter_keeps_workers_with_the_label() -> None:
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a", labels={"gpu": "h100"}), worker_row(2, "b", labels={"gpu": "4090"}),
                       worker_row(3, "c", labels={})))
    assert [w["id"] for w in cluster_view(h.rt, Filters(label="gpu"))["workers"]] == [1, 2]
    assert [w["id"] for w in cluster_view(h.rt, Filters(label="gpu=4090"))["workers"]] == [2]
    assert cluster_view(h.rt, Filters(label="nope=1"))["workers"] == []
