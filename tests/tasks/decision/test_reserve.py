"""Booking a decision: conflicts retry with a fresh snapshot, then park; only the recorded decision books."""

from __future__ import annotations

import pytest
from service_builders import small_request, submit_and_decide, uniform_cluster

from tasks.base.step import Step
from tasks.decision.decide import decide
from tasks.decision.publish import publish
from tasks.decision.reserve import reserve
from tasks.testing import Harness, isolated_settings


def _decide_two_on_one_snapshot(h: Harness) -> tuple[Step, Step]:
    h.submit(small_request("a"))
    h.submit(small_request("b"))
    items = [h.queue.popleft(), h.queue.popleft()]
    steps = [decide(h.rt, i.request_id, i.seq, i.attempt, "t") for i in items]
    assert steps[0] is not None and steps[1] is not None
    return steps[0], steps[1]


def test_a_conflicting_reservation_retries_with_a_fresh_snapshot() -> None:
    h = Harness(settings=isolated_settings(decide_lock=False))
    h.apply(uniform_cluster(workers=1, gpus=2))
    first, second = _decide_two_on_one_snapshot(h)
    assert first.booking == {**first.booking, "claims": second.booking["claims"]}  # type: ignore[index]
    assert reserve(h.rt, first) is not None
    assert reserve(h.rt, second) is None  # conflict: a retry was queued
    (retry,) = list(h.queue)
    assert (retry.request_id, retry.seq, retry.attempt) == ("b", 0, 1)
    assert 0 <= retry.countdown <= h.settings.max_countdown_s
    watchdog = h.rt.partition.now_ms() + int(h.settings.stuck_after_s * 1000)
    assert h.rt.client.zrange(h.rt.keys.outbox, 0, -1, withscores=True) == [
        ("a|0|0", pytest.approx(watchdog, abs=1000)),
        ("b|0|1", watchdog),
    ]
    publish(h.rt, first)
    h.pump()
    assert sorted(r["status"] for r in h.results()) == ["scheduled", "scheduled"]
    assert h.rt.client.zcard(h.rt.keys.outbox) == 0  # nothing in flight, no watchdog left
    booked = {m.request_id: m for m in h.rt.cluster.instance_meta().values()}
    claims = h.rt.cluster.claims()
    assert set(claims[f"req:{booked['a'].request_id}"]) != set(claims["req:b"])


def test_exhausted_conflicts_park_quietly_and_retry_on_a_timer() -> None:
    h = Harness(
        settings=isolated_settings(conflict_max_attempts=1, conflict_retry_after_s=2, decide_lock=False)
    )
    h.apply(uniform_cluster(workers=1, gpus=2))
    first, second = _decide_two_on_one_snapshot(h)
    publish(h.rt, reserve(h.rt, first))  # type: ignore[arg-type]
    parked_step = reserve(h.rt, second)
    assert parked_step is not None and parked_step.reasons == ["conflict_retries_exhausted"]
    assert publish(h.rt, parked_step) == "parked"
    assert [r["status"] for r in h.results()] == ["scheduled"]  # no unschedulable notice
    h.clock.advance(2)
    h.drain()
    h.pump()
    assert [r["status"] for r in h.results()] == ["scheduled", "scheduled"]


def test_steps_of_another_decision_cannot_book_publish_or_park() -> None:
    h = Harness(settings=isolated_settings(decide_lock=False))
    h.apply(uniform_cluster())
    step = submit_and_decide(h, "a")
    assert step is not None and step.action == "reserve"
    forged = Step.from_dict({**step.to_dict(), "result_digest": "0" * 64})
    assert reserve(h.rt, forged) is None  # stale: not the recorded decision
    assert h.rt.cluster.ledger()[1] == {}
    forged.action = "publish"
    assert publish(h.rt, forged) == "stale"
    booked = reserve(h.rt, step)
    assert booked is not None and h.record("a")["state"] == "booked"
    parking = Step.from_dict({**step.to_dict(), "action": "park", "reasons": ["x"]})
    assert publish(h.rt, parking) == "stale"  # a booked request never parks
    assert h.rt.parked.entries() == {} and h.results() == []
    assert publish(h.rt, booked) == "published"
