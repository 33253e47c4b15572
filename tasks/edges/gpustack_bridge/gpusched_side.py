"""What the bridge asks of gpusched, through its client API only (:class:`tasks.ServiceClient`).

The bridge never keeps its own copy of what gpusched decided: a request's record (the
accepted request, the published result or ``unschedulable`` notice, ``moved_to`` when its
booking was moved) is the truth, read again whenever an instance is reconciled. That makes
a bridge restart a non-event: nothing it held in memory is needed to finish its work.

Only what a replica acknowledged is acted on (docs/service.md, *Failover*): a result or a
notice on the master alone may be taken away by a failover and decided again elsewhere, so a
placement written from it could be one gpusched no longer holds. Such a chain is
``unacknowledged``: nothing is written for it and nothing is judged, until the results reader
sees the acknowledgement (:meth:`tasks.ServiceClient.acknowledged_entries`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from tasks.base.lifecycle import RecordState
from tasks.edges.client import ServiceClient

#: Most moves followed from a request to the booking that replaced it.
MAX_MOVES = 64

Kind = Literal["unknown", "waiting", "unacknowledged", "placed", "unschedulable", "rejected", "finished"]


@dataclass(frozen=True, slots=True)
class Desired:
    """What gpusched says about one instance's request chain.

    ``kind``: ``unknown`` (never submitted, or expired), ``waiting`` (accepted, not decided or
    being moved), ``unacknowledged`` (a result or notice of the chain that no replica holds
    yet: a failover could take it away), ``placed`` (``result`` is the ``scheduled`` result of
    ``request_id``, its booking held), ``unschedulable`` (``result`` is the notice; it waits
    parked), ``rejected`` (``result`` says why), ``finished`` (cancelled or released: nothing
    held).
    ``history``: the ``scheduled`` results of earlier links of the chain (moved placements).
    """

    kind: Kind
    request_id: str
    result: dict[str, Any] | None = None
    history: tuple[dict[str, Any], ...] = ()


def _load(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    value = json.loads(text)
    return value if isinstance(value, dict) else None


class GpuschedSide:
    """The bridge's view of one gpusched partition."""

    def __init__(self, client: ServiceClient) -> None:
        self.client = client

    def record(self, request_id: str) -> dict[str, str]:
        return self.client.rt.records.record(request_id)

    def known(self, request_id: str) -> bool:
        """Whether gpusched has a record of ``request_id`` (the bridge submitted it)."""
        return bool(self.client.rt.client.exists(self.client.rt.keys.request(request_id)))

    def submit(self, request: dict[str, Any]) -> str:
        """Submit (idempotent on ``request_id``); the submission's status."""
        return str(self.client.submit(request).status)  # type: ignore[union-attr]

    def cancel(self, request_id: str) -> str:
        return str(self.client.cancel(request_id).get("status", ""))

    def desired(self, request_id: str) -> Desired:
        """Follow ``request_id``'s moves to its current link and say what it holds."""
        history: list[dict[str, Any]] = []
        current = request_id
        for _ in range(MAX_MOVES):
            record = self.record(current)
            if not record:
                return Desired(
                    "unknown" if current == request_id else "waiting", current, None, tuple(history)
                )
            if not self._acknowledged(record):
                return Desired("unacknowledged", current, None, tuple(history))
            result = _load(record.get("result")) if record.get("state") == RecordState.DONE else None
            if record.get("moved_to"):
                if result is not None and result.get("status") == "scheduled":
                    history.append(result)
                current = record["moved_to"]
                continue
            return self._link(record, current, result, tuple(history))
        return Desired("waiting", current, None, tuple(history))

    def _acknowledged(self, record: dict[str, str]) -> bool:
        """Whether a replica holds the result (when done) and the notice (when any) ``record`` names."""
        done = record.get("state") == RecordState.DONE and record.get("result")
        if done and not self.client.readable(record.get("result_id")):
            return False
        return not record.get("notice") or self.client.readable(record.get("notice_id"))

    @staticmethod
    def _link(
        record: dict[str, str], rid: str, result: dict[str, Any] | None, history: tuple[dict[str, Any], ...]
    ) -> Desired:
        if result is None:
            notice = _load(record.get("notice"))
            if notice is not None and notice.get("status") == "unschedulable":
                return Desired("unschedulable", rid, notice, history)
            return Desired("waiting", rid, None, history)
        status = result.get("status")
        if status == "scheduled" and not record.get("released"):
            return Desired("placed", rid, result, history)
        if status == "scheduled":  # released: let go, or about to be moved (moved_to follows)
            return Desired("finished", rid, result, history)
        if status == "unschedulable":
            return Desired("unschedulable", rid, result, history)
        if status == "rejected":
            return Desired("rejected", rid, result, history)
        return Desired("finished", rid, result, history)


def live_request_ids(side: GpuschedSide) -> set[str]:
    """Requests that hold or wait for GPUs: every booking's, and every parked one's."""
    rt = side.client.rt
    booked = {meta.request_id for meta in rt.cluster.instance_meta().values() if meta.request_id}
    parked = {str(rid) for rid in rt.client.hkeys(rt.keys.parked)}
    return booked | parked
