"""Terminal results: published exactly once; an edge rejection never overwrites a request."""

from __future__ import annotations

from record_steps import accept, booking, decided, reject, reserve_booking, set_capacity

from tasks.testing import Harness


def test_publish_is_exactly_once(h: Harness) -> None:
    set_capacity(h, **{"1_cuda_0": 100})
    decided(h)
    # a scheduled result is published only once its booking is made
    assert reserve_booking(h, booking({"1:cuda:0": 40}), 0).status == "booked"
    results = h.rt.results
    first = h.rt.partition.call(results.publish_call("r1", "scheduled", seq=0, attempt=0, result_digest="d"))
    second = h.rt.partition.call(results.publish_call("r1", "scheduled", seq=0, attempt=0, result_digest="d"))
    assert first[0] == "published" and second[0] == "duplicate"
    results = h.results()
    assert len(results) == 1 and results[0]["terminal"] == "1"
    assert results[0]["result"] == '{"status":"scheduled"}'
    assert h.record("r1")["state"] == "done"
    assert h.rt.client.ttl(h.rt.keys.request("r1")) == -1  # lives as long as its booking


def test_edge_rejection_never_overwrites_an_inflight_request(h: Harness) -> None:
    accept(h)
    outcome = reject(h, "r1", "{}")
    assert outcome == ("conflict", "digest")  # another request (digest "rd") under a known id
    assert h.record("r1")["state"] == "queued" and h.results() == []
    fresh = reject(h, "r2", '{"status":"rejected"}')
    assert fresh[0] == "published"
    assert h.record("r2")["state"] == "done"
    assert h.rt.client.ttl(h.rt.keys.request("r2")) > 0
