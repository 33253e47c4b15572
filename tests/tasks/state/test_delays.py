"""The delay sets: leased, acknowledged by score, re-driven with back-off."""

from __future__ import annotations

from record_steps import accept

from tasks.state.delays import REDRIVE_DOUBLINGS, outbox_member, parse_outbox_member
from tasks.testing import Harness


def test_claim_due_leases_and_ack_removes_only_the_claimed_score(h: Harness) -> None:
    h.rt.client.zadd(h.rt.keys.outbox, {"a|0|0": 1, "b|0|0": h.rt.partition.now_ms() + 60_000})
    claimed = h.rt.delays.claim_due(h.rt.keys.outbox)
    assert [member for member, _ in claimed] == ["a|0|0"]
    member, lease = claimed[0]
    assert h.rt.delays.claim_due(h.rt.keys.outbox) == []  # leased, not due again yet
    h.rt.client.zadd(h.rt.keys.outbox, {member: lease + 1})  # re-scheduled meanwhile
    assert not h.rt.delays.ack_due(h.rt.keys.outbox, member, lease)
    assert h.rt.delays.ack_due(h.rt.keys.outbox, member, lease + 1)


def test_outbox_members_round_trip_ids_containing_separators() -> None:
    assert parse_outbox_member(outbox_member("a|b:c", 3, 4)) == ("a|b:c", 3, 4)


def test_the_redrive_step_backs_off_and_forgets_obsolete_entries(h: Harness) -> None:
    accept(h, outbox_due_ms=1)
    now = h.rt.partition.now_ms()
    period = int(h.settings.stuck_after_s * 1000)
    assert h.rt.delays.redrive("r1", 0, 0, 1) == ("decide", "queued")
    assert h.rt.client.zscore(h.rt.keys.outbox, "r1|0|0") == now + 2 * period
    assert h.rt.delays.redrive("r1", 0, 0, 1) == ("decide", "queued")
    assert h.rt.client.zscore(h.rt.keys.outbox, "r1|0|0") == now + 4 * period
    for _ in range(10):
        h.rt.delays.redrive("r1", 0, 0, 1)
    assert h.rt.client.zscore(h.rt.keys.outbox, "r1|0|0") == now + 2**REDRIVE_DOUBLINGS * period
    assert h.rt.delays.redrive("r1", 0, 1, 1)[0] == "gone"  # not the current attempt: entry kept
    h.rt.client.zadd(h.rt.keys.outbox, {"r1|0|1": 7})
    assert h.rt.delays.redrive("r1", 0, 1, 7)[0] == "gone"
    assert h.rt.client.zscore(h.rt.keys.outbox, "r1|0|1") is None
    assert [e.data["redrives"] for e in h.events(["sched.request.redriven"])] == list(range(1, 13))
