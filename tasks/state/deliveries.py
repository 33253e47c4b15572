"""The redelivery guard's state: delivery and error counts per task message, the dead letters.

``gpusched:delivery:<task_id>`` holds the starts of one message that never
finished (the process died), one member per start, ``gpusched:errors:<task_id>``
counts its unexpected exceptions; both expire with the broker's visibility window. A message the
guard gives up on goes to ``gpusched:deadletter`` (``dead_letter.lua``),
which also finishes its request when the message drove the request's
current step. The policy (when to give up) is the runtime's
(:mod:`tasks.runtime.middleware`).
"""

from __future__ import annotations

import redis

from scheduler_core import render_text
from tasks.base.digests import sha256_hex
from tasks.state.partition import Partition


class Deliveries:
    """Counting deliveries and errors of task messages; dead-lettering one."""

    def __init__(self, partition: Partition) -> None:
        self._partition = partition

    def count_delivery(self, task_id: str, start: str) -> int:
        """Count one start of a task message; returns how many starts have not finished.

        Idempotent per start: ``start`` (unique to this delivery) is added to a set, so a
        write redis-py retries after its reply was lost (a connection reset) counts once,
        where an ``INCR`` counted the same start twice. Expires with the visibility window.
        """
        p = self._partition
        key = p.keys.delivery(task_id)
        pipe = p.client.pipeline(transaction=True)
        pipe.sadd(key, start)
        pipe.expire(key, self._ttl_s())
        pipe.scard(key)
        *_, count = pipe.execute()
        return int(count)

    def clear_delivery(self, task_id: str, *, client: redis.Redis | None = None) -> None:
        """The message's delivery ended without its process dying: forget its crash count.

        Args:
            client: another client for the partition's Redis (e.g. one with a short timeout).
        """
        p = self._partition
        (client or p.client).delete(p.keys.delivery(task_id))

    def count_error(self, task_id: str) -> int:
        """Count one unexpected exception of a task message."""
        return self._count(self._partition.keys.task_errors(task_id))

    def clear_errors(self, task_id: str) -> None:
        """Forget a message's error count."""
        p = self._partition
        p.client.delete(p.keys.task_errors(task_id))

    def _ttl_s(self) -> int:
        settings = self._partition.settings
        return settings.visibility_timeout_s * (settings.max_crashes + 2)

    def _count(self, key: str) -> int:
        pipe = self._partition.client.pipeline(transaction=True)
        pipe.incr(key)
        pipe.expire(key, self._ttl_s())
        count, _ = pipe.execute()
        return int(count)

    def dead_letter(
        self,
        *,
        request_id: str,
        task_name: str,
        task_id: str,
        reason: str,
        detail: str,
        deliveries: int,
        args_json: str,
        rejected_json: str,
        seq: int = 0,
        attempt: int = 0,
        result_digest: str = "",
        intake_task: str = "",
        request_json: str = "",
        finish: bool = True,
    ) -> tuple[str, str]:
        """Record a message the guard gave up on; finish its request if the message drove it.

        Returns:
            (dead-letter entry id, results entry id or "" when nothing was published).

        Args:
            seq, attempt, result_digest: what the message carries; the request
                is finished only if its record is at that step.
            intake_task: for a raw request message, its own task id (the
                record must have been accepted by it).
            request_json: for a raw request message, the record to create
                when none exists.
            finish: False to record the dead letter only (a message that failed
                validation never finishes a request, whichever it names).
        """
        p = self._partition
        k = p.keys
        s = p.settings
        # the detail and the names quote the message (an exception's text, its headers)
        detail, task_name, task_id = render_text(detail), render_text(task_name), render_text(task_id)
        record_key = k.request(request_id) if request_id else k.request("-")
        reply = p.run(
            "dead_letter",
            [k.deadletter, k.events, record_key, k.results, k.parked, k.outbox],
            [
                *p.meta().argv(), request_id, task_name, task_id, reason, detail,
                deliveries, args_json, rejected_json, sha256_hex(rejected_json),
                s.results_maxlen, s.request_ttl_s, p.now_ms(),
                seq, attempt, result_digest, intake_task, request_json, "1" if finish else "0",
            ],
        )
        return reply[0], reply[1]
