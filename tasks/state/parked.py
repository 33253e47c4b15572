"""Parked requests (``gpusched:parked``): park one, wake those a change could unblock.

Which requests a change wakes is decided by :mod:`tasks.state.parking`
(reason codes and wake rules); this module holds the two atomic steps and the
read. Parking checks the wake epoch the decision read: a change that landed
meanwhile turns the park into an immediate requeue (no lost wake-up).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tasks.base.events import dumps
from tasks.state.partition import OutcomeReply, Partition, outcome_reply
from tasks.state.scripts import ScriptCall


class ParkedRequests:
    """Parking and waking requests, one atomic step each."""

    def __init__(self, partition: Partition) -> None:
        self._partition = partition

    def park_call(
        self,
        request_id: str,
        seq: int,
        attempt: int,
        *,
        result_digest: str,
        parked_entry: str,
        notice_json: str,
        event_data: str,
        epoch: int,
        requeue_due_ms: int,
        announce: bool = True,
        retry_timer: tuple[str, int] | None = None,
    ) -> ScriptCall[OutcomeReply]:
        """Park the request, or requeue it if the cluster changed meanwhile (see ``park.lua``).

        Args:
            retry_timer: ``(member, due ms)`` of the timer that retries a request
                parked by reservation conflicts, armed in the same step.
        """
        p = self._partition
        k = p.keys
        member, due = retry_timer if retry_timer else ("", 0)
        keys = [k.request(request_id), k.parked, k.results, k.events, k.epoch, k.outbox, k.timers]
        args = [
            *p.meta().argv(), request_id, seq, attempt, result_digest, parked_entry,
            notice_json, p.settings.results_maxlen, event_data, p.now_ms(), epoch,
            requeue_due_ms, "1" if announce else "0", member, due,
        ]
        return ScriptCall("park", keys, args, outcome_reply)

    def wake(
        self, targets: Sequence[tuple[str, int]], by: dict[str, Any], due_ms: int
    ) -> list[tuple[str, int]]:
        """Wake parked requests still at the given seq (``wake.lua``); returns (request id, new seq)."""
        if not targets:
            return []
        p = self._partition
        k = p.keys
        keys = [k.parked, k.outbox, k.events, *(k.request(rid) for rid, _ in targets)]
        args: list[Any] = [*p.meta().argv(), due_ms, dumps(by)]
        for rid, seq in targets:
            args.extend([rid, seq])
        reply = p.run("wake", keys, args)
        return [(reply[i], int(reply[i + 1])) for i in range(0, len(reply), 2)]

    def entries(self) -> dict[str, str]:
        """Parked entries by request id (raw JSON)."""
        p = self._partition
        return dict(p.client.hgetall(p.keys.parked))  # type: ignore[arg-type]
