"""The drainer's pass: lost messages and lost publish steps are driven again, with back-off."""

from __future__ import annotations

from service_builders import small_request, submit_and_decide, uniform_cluster

from tasks.decision.reserve import reserve
from tasks.testing import Harness, isolated_settings


def test_a_lost_decision_message_is_sent_again_by_the_watchdog() -> None:
    h = Harness()
    h.apply(uniform_cluster())
    h.submit(small_request("r"))
    h.queue.clear()  # the message vanished (e.g. popped by a consumer as Redis died)
    h.clock.advance(h.settings.stuck_after_s - 1)
    h.drain()
    assert not h.queue
    h.clock.advance(2)
    assert h.drain()["enqueued"] == 1
    h.pump()
    assert [r["status"] for r in h.results()] == ["scheduled"]
    assert h.rt.client.zcard(h.rt.keys.outbox) == 0


def test_a_lost_publish_step_is_resumed_by_the_watchdog() -> None:
    h = Harness(settings=isolated_settings(decide_lock=False))
    h.apply(uniform_cluster())
    step = submit_and_decide(h, "r")
    assert step is not None and reserve(h.rt, step) is not None  # publish never runs
    h.clock.advance(h.settings.stuck_after_s + 1)
    h.drain()
    assert [s["action"] for s in h.resumed] == ["publish"]
    assert [r["status"] for r in h.results()] == ["scheduled"]
    h.clock.advance(h.settings.stuck_after_s + 1)
    assert h.drain() == {"enqueued": 0, "followups": 0, "timers": 0}


def test_the_watchdog_backs_off_and_logs_every_redrive() -> None:
    h = Harness()
    h.apply(uniform_cluster())
    h.submit(small_request("r"))  # its message waits in a long queue backlog
    period = h.settings.stuck_after_s
    for _ in range(2):
        h.clock.advance(period + 1)
        h.drain()
    assert len(h.queue) == 2  # one re-drive, not one per period
    h.clock.advance(2 * period)
    h.drain()
    assert len(h.queue) == 3
    redriven = h.events(["sched.request.redriven"])
    assert [e.data["redrives"] for e in redriven] == [1, 2]
    assert redriven[1].data["next_due_ms"] - h.rt.partition.now_ms() == 4 * period * 1000
    h.pump()  # every copy of the message: one decision, one result
    assert len(h.events(["sched.decision.made"])) == 1
    assert [r["status"] for r in h.results()] == ["scheduled"]
    assert h.rt.client.zcard(h.rt.keys.outbox) == 0
