"""Taking many requests in at once: each validated and recorded as alone, decided in batches.

:func:`submit_requests` is the body of ``ServiceClient.submit_many`` (and of
``gpusched submit`` with several files or JSON lines). Every request keeps the
intake of :func:`tasks.flows.submit.submit_request`: its id rule, its
validation (an invalid one gets its own ``rejected`` result, naming the
field; the others go on), its record with an outbox entry, its idempotency
(``duplicate``) and conflict rules. Only the transport differs: the records
are written in one round trip, and the accepted requests' decisions are sent
as ``gpusched.decide_batch`` messages of up to ``decide_batch_size`` requests
(:func:`tasks.flows.enqueue.enqueue_many`; one request alone goes as its
own ``gpusched.decide`` message).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from tasks.base.logging import get_logger
from tasks.flows.enqueue import enqueue_many
from tasks.flows.submit import Submission, accepted_submission, rejected_submission
from tasks.intake.limits import IntakeLimits
from tasks.intake.requests import Normalized, normalize
from tasks.state.context import Runtime
from tasks.state.outages import RedisOutOfMemory
from tasks.state.records import Accepted
from tasks.state.scripts import Pending

log = get_logger(__name__)


def submit_requests(rt: Runtime, requests: Sequence[Any]) -> list[Submission]:
    """Validate, record and enqueue many requests; one :class:`Submission` each, in order.

    A request id named twice is recorded once: the second answers ``duplicate``
    (same request) or ``conflict``, as two submits would.

    Raises:
        tasks.state.outages.RedisOutOfMemory, redis.RedisError: as
            :func:`tasks.flows.submit.submit_request` (submitting the same requests
            again is safe: those recorded answer ``duplicate`` and are driven).
    """
    limits = IntakeLimits.of(rt.settings)
    normalized = [normalize(request, limits) for request in requests]
    try:
        return _record_all(rt, normalized)
    except redis.exceptions.OutOfMemoryError:
        raise RedisOutOfMemory(f"a batch of {len(requests)} requests") from None


def _record_all(rt: Runtime, normalized: list[Normalized]) -> list[Submission]:
    batch = rt.partition.batch()
    due = rt.partition.lease_deadline_ms()
    replies: dict[int, Pending[Accepted]] = {}
    for position, item in enumerate(normalized):
        if item.rejection is None:
            replies[position] = batch.script(rt.records.accept_call(
                item.request_id, item.request_json, item.digest, pinned=item.pinned, outbox_due_ms=due,
            ))
    batch.execute()
    submissions = [
        accepted_submission(item, replies[position].value) if position in replies
        else rejected_submission(rt, item)
        for position, item in enumerate(normalized)
    ]
    _enqueue(rt, [s.request_id for s in submissions if s.status == "accepted"])
    return submissions


def _enqueue(rt: Runtime, request_ids: list[str]) -> None:
    """Send the accepted requests' decisions; a failure is left to the watchdog (they are recorded)."""
    try:
        enqueue_many(rt, [(request_id, 0, 0) for request_id in request_ids])
    except Exception as error:  # as submit_request: the outbox entries send them after outbox_lease_s
        log.warning("enqueue_deferred_to_watchdog", requests=len(request_ids), error=repr(error))
