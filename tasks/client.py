"""Control-plane client: submit requests, wait for results, change the cluster.

    from tasks.client import submit
    result = submit(request_dict, wait=True, timeout=30)   # Contract 1 result dict

A request is validated here, at the edge: an invalid one gets its terminal
``rejected`` result (naming the field) at once, without a worker. A valid one
is recorded (idempotent on ``request_id``: the same id submitted twice yields
one decision) together with an outbox entry, then the decision chain is sent
to ``gpusched.requests``; if this process dies in between, a worker's drainer
sends it after ``outbox_lease_s``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from tasks import pipeline, reschedule
from tasks.edge import normalize
from tasks.runtime import Runtime, build_runtime, redis_client
from tasks.settings import Settings, get_settings
from tasks.streams import read_new


class WaitTimeout(TimeoutError):
    """No result arrived within the timeout (the request is still accepted)."""


@dataclass(frozen=True, slots=True)
class Submission:
    """What :meth:`ServiceClient.submit` did.

    Attributes:
        request_id: the idempotency key.
        status: ``accepted`` (new), ``duplicate`` (known id; no new decision) or
            ``rejected`` (invalid input; its result is published).
        state: the record's state for a duplicate.
        result: the rejected result for ``rejected``.
    """

    request_id: str
    status: str
    state: str = ""
    result: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (printed by ``gpusched submit``)."""
        data: dict[str, Any] = {"request_id": self.request_id, "status": self.status}
        if self.state:
            data["state"] = self.state
        if self.result is not None:
            data["result"] = self.result
        return data


def submit_request(rt: Runtime, request: Any) -> Submission:
    """Validate, record and enqueue one request (the body of :meth:`ServiceClient.submit`)."""
    normalized = normalize(request)
    if normalized.rejection is not None:
        outcome, _ = pipeline.publish_rejection(rt, normalized)
        if outcome == "published":
            return Submission(normalized.request_id, "rejected",
                              result=json.loads(normalized.rejection.model_dump_json()))
        return Submission(normalized.request_id, "duplicate",
                          state=rt.store.record(normalized.request_id).get("state", ""))
    due = rt.store.now_ms() + pipeline.lease_ms(rt)
    accepted = rt.store.accept(
        normalized.request_id, normalized.request_json, normalized.digest,
        pinned=normalized.pinned, outbox_due_ms=due,
    )
    if not accepted.accepted:
        return Submission(normalized.request_id, "duplicate", state=accepted.state)
    pipeline.enqueue(rt, normalized.request_id, 0, 0)
    return Submission(normalized.request_id, "accepted")


def _dispatch(request_id: str, seq: int, attempt: int, countdown: float) -> None:
    from tasks.app import dispatch_decision

    dispatch_decision(request_id, seq, attempt, countdown)


def _resume(step: dict[str, Any]) -> None:
    from tasks.app import dispatch_publish

    dispatch_publish(step)


class ServiceClient:
    """Talks to one gpusched deployment (``settings.redis_url``, ``settings.cluster``)."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or get_settings()
        from tasks.app import configure

        configure(self.settings)
        self.rt: Runtime = build_runtime(self.settings, _dispatch, _resume)
        self._blocking = redis_client(self.settings, blocking=True)

    # ------------------------------------------------------------------ submit
    def submit(
        self, request: Any, *, wait: bool = False, timeout: float = 30.0, terminal: bool = False
    ) -> Submission | dict[str, Any]:
        """Submit one request (Contract 1 dict).

        Args:
            request: the request; ``workers``/``model_instances`` are ignored
                (the service holds the cluster).
            wait: block until the request's first result (or, with ``terminal``,
                its terminal result) is on the results stream and return it.
            timeout: seconds to wait.

        Returns:
            The result dict when waiting, else a :class:`Submission`.

        Raises:
            WaitTimeout: waiting timed out.
            redis.RedisError: Redis is unreachable (nothing was accepted).
        """
        start = self._last_result_id() if wait else "0-0"
        submission = self._submit(request)
        if not wait:
            return submission
        if submission.result is not None:
            return submission.result
        return self.wait(submission.request_id, timeout=timeout, start_id=start, terminal=terminal)

    def _submit(self, request: Any) -> Submission:
        return submit_request(self.rt, request)

    # -------------------------------------------------------------------- wait
    def _last_result_id(self) -> str:
        last = self.rt.client.xrevrange(self.rt.keys.results, count=1)
        return str(last[0][0]) if last else "0-0"

    def stored_result(self, request_id: str, *, terminal: bool = False) -> dict[str, Any] | None:
        """The request's published result from its record, if one was published."""
        record = self.rt.store.record(request_id)
        published = record.get("state") == "done" or (
            not terminal and record.get("announced") == "1"
        )
        if published and record.get("result"):
            value: dict[str, Any] = json.loads(record["result"])
            return value
        return None

    def wait(
        self, request_id: str, *, timeout: float = 30.0, start_id: str = "0-0", terminal: bool = False
    ) -> dict[str, Any]:
        """Block until a result for ``request_id`` is on the results stream.

        Raises:
            WaitTimeout: nothing arrived within ``timeout`` seconds.
        """
        stored = self.stored_result(request_id, terminal=terminal)
        if stored is not None:
            return stored
        deadline = time.monotonic() + timeout
        cursor = start_id
        while (remaining := deadline - time.monotonic()) > 0:
            block = max(1, min(int(remaining * 1000), 1000))
            for entry_id, fields in read_new(self._blocking, self.rt.keys.results, cursor,
                                             count=500, block_ms=block):
                cursor = entry_id
                if fields.get("request_id") == request_id and (
                    not terminal or fields.get("terminal") == "1"
                ):
                    value: dict[str, Any] = json.loads(fields["result"])
                    return value
        raise WaitTimeout(f"no result for {request_id} within {timeout:g} s")

    # ----------------------------------------------------------------- cluster
    def apply_cluster(self, document: dict[str, Any]) -> dict[str, Any]:
        """Replace the cluster with a snapshot (in this process) and wake parked requests.

        Raises:
            pydantic.ValidationError / ValueError: invalid rows (nothing changes).
        """
        return reschedule.apply_snapshot(self.rt, document)

    def cluster_event(self, event: dict[str, Any], *, queue: bool = True) -> dict[str, Any]:
        """Send a cluster event to ``gpusched.cluster_event`` (or apply it here)."""
        if not queue:
            return reschedule.handle_cluster_event(self.rt, event)
        from tasks.app import CLUSTER_EVENT, app

        result = app.signature(CLUSTER_EVENT, args=(event,)).apply_async()
        return {"kind": event.get("kind"), "status": "queued", "task_id": result.id}

    def close(self) -> None:
        """Close the Redis connections."""
        self.rt.client.close()
        self._blocking.close()


_DEFAULT: ServiceClient | None = None


def default_client() -> ServiceClient:
    """A client for the process settings (created on first use)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = ServiceClient()
    return _DEFAULT


def submit(request: Any, *, wait: bool = False, timeout: float = 30.0) -> Submission | dict[str, Any]:
    """Submit ``request`` to the deployment named by ``GPUSCHED_*`` settings.

    Returns:
        The result dict when ``wait`` is true, else a :class:`Submission`.
    """
    return default_client().submit(request, wait=wait, timeout=timeout)


__all__ = ["ServiceClient", "Submission", "WaitTimeout", "default_client", "submit", "submit_request"]
