"""The delay sets: work due later, in Redis sorted sets scored by due time (ms).

* ``gpusched:outbox`` — ``<request_id>|<seq>|<attempt>``: the watchdog entry
  of every request in flight (written by the Lua step that makes a request
  need a decision, removed by the step that finishes or parks it);
* ``gpusched:timers`` — ``grace:<worker>``, ``stable:<worker>``,
  ``retry:<request>|<seq>`` (:mod:`tasks.flows.timers`);
* ``gpusched:followups`` — cluster changes' unfinished follow-ups
  (:mod:`tasks.flows.followups`).

Members are leased, not popped (``claim_due.lua``): a drainer that dies
mid-pass loses nothing. Celery countdowns are never used for these delays:
a countdown message waits in a worker's memory and is restored only after
the broker's visibility timeout.
"""

from __future__ import annotations

from collections.abc import Sequence

from tasks.state.partition import Partition

#: At most 2**REDRIVE_DOUBLINGS watchdog periods between two re-drives of one attempt
#: (≈ 3 h at the default ``stuck_after_s``): a lost message is still found, a long
#: backlog gets a logarithmic number of extra messages.
REDRIVE_DOUBLINGS = 5


def outbox_member(request_id: str, seq: int, attempt: int) -> str:
    """Outbox member naming one decision attempt."""
    return f"{request_id}|{seq}|{attempt}"


def parse_outbox_member(member: str) -> tuple[str, int, int]:
    """Inverse of :func:`outbox_member` (request ids may contain ``|``)."""
    request_id, seq, attempt = member.rsplit("|", 2)
    return request_id, int(seq), int(attempt)


class DelaySets:
    """Leasing, acknowledging and re-arming the members of the delay sets."""

    def __init__(self, partition: Partition) -> None:
        self._partition = partition

    def claim_due(self, zset: str, limit: int = 100) -> list[tuple[str, int]]:
        """Lease due members of ``zset`` (``claim_due.lua``); returns (member, lease score) pairs."""
        p = self._partition
        now = p.now_ms()
        lease = now + int(p.settings.outbox_lease_s * 1000)
        members = p.run("claim_due", [zset], [now, lease, limit])
        return [(member, lease) for member in members]

    def ack_due(self, zset: str, member: str, score: int) -> bool:
        """Remove ``member`` if it still has ``score`` (``ack_due.lua``)."""
        return bool(self._partition.run("ack_due", [zset], [member, score]))

    def arm_watchdog(self, request_id: str, seq: int, attempt: int) -> None:
        """Push an in-flight decision's outbox deadline to ``now + stuck_after_s``.

        Only an existing entry is moved (``ZADD XX``): a request that finished
        meanwhile removed its entry and must not get it back.
        """
        p = self._partition
        due = p.now_ms() + int(p.settings.stuck_after_s * 1000)
        p.client.zadd(p.keys.outbox, {outbox_member(request_id, seq, attempt): due}, xx=True)

    def arm_watchdogs(self, items: Sequence[tuple[str, int, int]]) -> None:
        """:meth:`arm_watchdog` for many decisions (one batch message), in one command."""
        p = self._partition
        due = p.now_ms() + int(p.settings.stuck_after_s * 1000)
        members = {outbox_member(request_id, seq, attempt): due for request_id, seq, attempt in items}
        p.client.zadd(p.keys.outbox, members, xx=True)

    def redrive(self, request_id: str, seq: int, attempt: int, lease: int) -> tuple[str, str]:
        """The watchdog's step for a due outbox entry (see ``redrive.lua``).

        Returns:
            ``("decide", state)``, ``("publish", step JSON)`` or ``("gone", state)``.
        """
        p = self._partition
        k = p.keys
        reply = p.run(
            "redrive",
            [k.request(request_id), k.outbox, k.events],
            [
                *p.meta().argv(), request_id, seq, attempt, lease, p.now_ms(),
                int(p.settings.stuck_after_s * 1000), REDRIVE_DOUBLINGS,
            ],
        )
        return reply[0], reply[1]

    def schedule_timer(self, member: str, due_ms: int) -> None:
        """(Re)arm a timer in ``gpusched:timers``."""
        p = self._partition
        p.client.zadd(p.keys.timers, {member: due_ms})
