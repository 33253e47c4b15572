"""``gpusched list`` and the console's requests: every request by its record's state, bounded reads."""

from __future__ import annotations

from service_builders import (
    assert_rescheduled_after_grace,
    booked_worker,
    cluster_of,
    small_request,
    two_workers_with_a_booking,
    worker_row,
)

from tasks.edges.cli_views import render_listing
from tasks.edges.request_list import ListQuery, category, list_requests
from tasks.flows.cancels import cancel_request
from tasks.testing import Harness


def _cluster() -> Harness:
    h = Harness()
    h.apply(cluster_of(worker_row(1, "h100-a", 2), worker_row(2, "w2", 1)))
    return h


def _states(listing: dict[str, object]) -> dict[str, str]:
    return {row["request_id"]: row["state"] for row in listing["requests"]}  # type: ignore[attr-defined]


def test_each_request_is_listed_under_its_records_state_with_where_and_why() -> None:
    h = _cluster()
    for rid in ("placed", "released", "cancelled-early"):
        h.submit(small_request(rid))
    h.submit(small_request("parked", worker_selector={"gpu": "nowhere"}))
    h.submit({"request_id": "bad",
              "model": {"name": "x", "backend": "SGLang", "backend_parameters": ["--tp-size", "0"]}})
    cancel_request(h.rt, "cancelled-early", by="client")
    h.pump()
    cancel_request(h.rt, "released", by="client")  # placed, then released
    h.submit(small_request("queued"))  # recorded, its decision not run yet
    listing = list_requests(h.rt)
    assert _states(listing) == {
        "placed": "placed", "released": "released", "cancelled-early": "cancelled", "parked": "parked",
        "bad": "rejected", "queued": "queued",
    }
    rows = {row["request_id"]: row for row in listing["requests"]}
    assert rows["parked"]["reasons"] == ["label_mismatch"]
    assert rows["placed"]["placement"][0]["worker"] in ("h100-a", "w2")
    assert rows["released"]["placement"] == []  # released: holds nothing
    assert rows["bad"]["error"]["field"] == "model.backend_parameters"
    assert listing["summary"]["states"]["parked"] == 1
    assert listing["summary"]["parked_reasons"] == {"label_mismatch": 1}
    assert listing["scanned"]["complete"] is True
    text = render_listing(listing, columns=200)
    assert "waits for label_mismatch" in text and "model.backend_parameters" in text


def test_filters_state_reason_search_since_and_limit() -> None:
    h = _cluster()
    h.submit(small_request("p-1", worker_selector={"gpu": "nowhere"}))
    h.submit(small_request("p-2", worker_selector={"gpu": "nowhere"}))
    h.submit(small_request("ok-1"))
    h.pump()
    assert set(_states(list_requests(h.rt, ListQuery(state="parked")))) == {"p-1", "p-2"}
    assert set(_states(list_requests(h.rt, ListQuery(reason="label_mismatch")))) == {"p-1", "p-2"}
    assert set(_states(list_requests(h.rt, ListQuery(reason="insufficient_vram")))) == set()
    assert set(_states(list_requests(h.rt, ListQuery(search="OK")))) == {"ok-1"}
    assert len(list_requests(h.rt, ListQuery(limit=1))["requests"]) == 1
    later = h.rt.partition.now_ms() + 60_000
    assert list_requests(h.rt, ListQuery(since_ms=later))["requests"] == []


def test_a_moved_request_is_listed_as_moved_with_the_request_that_replaced_it() -> None:
    h = two_workers_with_a_booking()
    lost = booked_worker(h, "r")
    h.event({"kind": "worker_state", "worker_id": lost, "state": "unreachable"})
    assert_rescheduled_after_grace(h)
    rows = {row["request_id"]: row for row in list_requests(h.rt, ListQuery(since_ms=0))["requests"]}
    assert rows["r"]["state"] == "moved" and rows["r"]["moved_to"] == "r~1"
    assert rows["r~1"]["state"] == "placed" and rows["r~1"]["reschedule_of"] == "r"
    assert [row["request_id"] for row in list_requests(h.rt, ListQuery(state="moved"))["requests"]] == ["r"]


def test_categories_of_record_states() -> None:
    assert category({"state": "done", "status": "scheduled", "moved_to": "r~1"}) == "moved"
    assert category({"state": "done", "status": "scheduled", "released": "1"}) == "released"
    assert category({"state": "done", "status": "unschedulable"}) == "expired"
    assert category({"state": "retrying"}) == "deciding"
    assert category({"state": "woken"}) == "queued"
