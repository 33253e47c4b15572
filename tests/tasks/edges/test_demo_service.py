"""The service demo's lines: whole messages (wrapped, never cut), claims in GiB on named workers."""

from __future__ import annotations

import json

from tasks.edges.demo_service import WIDTH, describe_event, describe_result

GIB = 1 << 30


def test_a_long_message_wraps_and_keeps_its_last_word() -> None:
    message = ("The model requires approximately 164.51 GiB of VRAM. " * 4) + "Final-word."
    text = describe_result({"request_id": "r", "status": "unschedulable", "messages": [message]})
    assert text.split()[-1] == "Final-word." and "Final-word." not in text.splitlines()[0]
    assert all(len(line) <= WIDTH for line in text.splitlines())
    assert " ".join(text.split()[2:]) == " ".join(message.split())  # every word, in order


def test_bookings_show_gib_on_named_workers_not_ledger_strings() -> None:
    claims = {"1:cuda:0": 66 * GIB, "2:cuda:3": int(41.33 * GIB)}
    fields = {"type": "sched.reservation.booked", "request_id": "r", "cluster_version": "3",
              "data": json.dumps({"claims": claims})}
    line = describe_event(fields, {1: "h100-a"})
    assert "h100-a cuda:0 66.00 GiB" in line and "worker 2 cuda:3 41.33 GiB" in line
    assert "=" not in line and ";" not in line
