"""Taking a request in: validate, record once, queue its decision (or publish its rejection).

Two doors lead in. A client (:class:`tasks.edges.client.ServiceClient`,
``gpusched submit``) calls :func:`submit_request`: the request is validated
in the client's process and recorded with an outbox entry before its
``gpusched.decide`` message is sent. Any other Celery-protocol client sends
the raw request as ``gpusched.decide``'s argument; the worker then calls
:func:`accept_raw` before deciding it. Either way an accepted request is
driven to its result: if the message is lost the outbox watchdog sends it
again (:mod:`tasks.state.delays`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tasks.base.digests import sha256_hex
from tasks.base.logging import get_logger
from tasks.flows.enqueue import enqueue
from tasks.intake.limits import IntakeLimits
from tasks.intake.requests import Normalized, error_of, normalize
from tasks.state.context import Runtime
from tasks.state.outages import OUT_OF_MEMORY_CANDIDATES, RedisOutOfMemory, is_out_of_memory
from tasks.state.records import Accepted

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Submission:
    """What :func:`submit_request` did.

    Attributes:
        request_id: the idempotency key.
        status: ``accepted`` (new), ``duplicate`` (known id, same request; no new
            decision), ``conflict`` (known id, different request: a client bug;
            nothing changes), ``rejected`` (invalid input; its result is published —
            not by a ``submit_via = "queue"`` client, which cannot write it) or
            ``queued`` (``submit_via = "queue"``: pushed onto the requests queue; a
            worker records it, answering duplicates and conflicts in its log).
        state: the record's state for a duplicate or a conflict.
        result: the rejected result for ``rejected``.
        digest: for a conflict, the digest of the request submitted now.
        stored_digest: for a conflict, the digest of the request the id holds.
    """

    request_id: str
    status: str
    state: str = ""
    result: dict[str, Any] | None = None
    digest: str = ""
    stored_digest: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (printed by ``gpusched submit``)."""
        data: dict[str, Any] = {"request_id": self.request_id, "status": self.status}
        if self.state:
            data["state"] = self.state
        if self.result is not None:
            data["result"] = self.result
        if self.status == "conflict":
            data["digest"] = self.digest
            data["stored_digest"] = self.stored_digest
        return data


def submit_request(rt: Runtime, request: Any) -> Submission:
    """Validate, record and enqueue one request (the body of ``ServiceClient.submit``).

    A known ``request_id`` is never decided again: the same request answers
    ``duplicate``, a different one ``conflict`` with both digests (and a
    ``sched.request.conflict`` event), so a control-plane bug that reuses an
    id is visible instead of silently answered with the first request's result.

    Raises:
        tasks.state.outages.RedisOutOfMemory: Redis is at ``maxmemory``: the
            request was not accepted and nothing was written (Lua scripts fail
            at their first write); resubmit later.
        redis.RedisError: Redis failed before or while the request was recorded.
            Nothing may have been accepted — or it was, and only the reply was
            lost: submitting the same request again is safe (it returns
            ``duplicate`` if the first attempt was recorded, and that request
            is driven to its result).
    """
    normalized = normalize(request, IntakeLimits.of(rt.settings))
    try:
        return _record(rt, normalized)
    except OUT_OF_MEMORY_CANDIDATES as error:
        if not is_out_of_memory(error):
            raise
        raise RedisOutOfMemory(f"request {normalized.request_id!r}") from None


def _record(rt: Runtime, normalized: Normalized) -> Submission:
    """Record a normalised request (or publish its rejection), then queue its decision."""
    if normalized.rejection is not None:
        return rejected_submission(rt, normalized)
    accepted = rt.records.accept(
        normalized.request_id, normalized.request_json, normalized.digest,
        pinned=normalized.pinned, outbox_due_ms=rt.partition.lease_deadline_ms(),
    )
    submission = accepted_submission(normalized, accepted)
    if submission.status != "accepted":
        return submission
    try:
        enqueue(rt, normalized.request_id, 0, 0)
    except Exception as error:
        # Accepted: the outbox entry written with the record sends it after outbox_lease_s, so no
        # failure to send may surface as an error — not an outage, nor kombu tripping over the
        # channel an out-of-memory publish left closed (AttributeError on its next publish).
        log.warning("enqueue_deferred_to_watchdog", request_id=normalized.request_id,
                    error=repr(error))
    return submission


def rejected_submission(rt: Runtime, normalized: Normalized) -> Submission:
    """Publish an invalid request's rejection (a new id only) and say what the id holds."""
    outcome, detail = publish_rejection(rt, normalized)
    if outcome == "published":
        assert normalized.rejection is not None
        return Submission(normalized.request_id, "rejected",
                          result=json.loads(normalized.rejection.model_dump_json()))
    state = rt.records.record(normalized.request_id).get("state", "")
    if outcome == "conflict":
        return Submission(normalized.request_id, "conflict", state=state,
                          digest=normalized.digest, stored_digest=detail or "")
    return Submission(normalized.request_id, "duplicate", state=state)


def accepted_submission(normalized: Normalized, accepted: Accepted) -> Submission:
    """The submission a record's ``accept`` reply means (``accepted``: its decision is to queue)."""
    if accepted.conflict:  # the caller gets both digests; the audit log has its event
        return Submission(normalized.request_id, "conflict", state=accepted.state,
                          digest=normalized.digest, stored_digest=accepted.stored_digest)
    if not accepted.accepted:
        return Submission(normalized.request_id, "duplicate", state=accepted.state)
    return Submission(normalized.request_id, "accepted")


def accept_raw(rt: Runtime, raw: Any, task_id: str) -> str | None:
    """Accept a raw request that arrived as ``gpusched.decide``'s argument.

    Returns:
        The request id to decide at (seq 0, attempt 0), or None when there is
        nothing to decide (invalid: rejected result published; duplicate id).
        A redelivery of the accepting message (same ``task_id``) decides again.
    """
    normalized = normalize(raw, IntakeLimits.of(rt.settings))
    if normalized.rejection is not None:
        publish_rejection(rt, normalized)
        return None
    watchdog = rt.partition.now_ms() + int(rt.settings.stuck_after_s * 1000)
    accepted = rt.records.accept(
        normalized.request_id, normalized.request_json, normalized.digest,
        intake_task=task_id, pinned=normalized.pinned, outbox_due_ms=watchdog,
    )
    if accepted.accepted or (accepted.intake_task == task_id and not accepted.conflict):
        return normalized.request_id
    if accepted.conflict:
        log.warning("request_id_conflict", request_id=normalized.request_id,
                    digest=normalized.digest, stored_digest=accepted.stored_digest)
    return None


def publish_rejection(rt: Runtime, normalized: Normalized) -> tuple[str, str | None]:
    """Publish the edge rejection of an invalid request (only if the id is new)."""
    assert normalized.rejection is not None
    result = normalized.rejection
    text = result.model_dump_json()
    return rt.results.reject(
        normalized.request_id, request_json=normalized.request_json,
        request_digest=normalized.digest, result_json=text, result_digest=sha256_hex(text),
        error=error_of(result),
    )
