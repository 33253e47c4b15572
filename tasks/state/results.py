"""Publishing terminal results on ``gpusched:results`` (at most once per request).

Both writes finish the request record (``finish`` in ``lib.lua``, the one way
a record reaches ``done``): :meth:`PublishedResults.publish_call` publishes
the recorded decision's result, :meth:`PublishedResults.reject` the edge
rejection of an invalid request. A request's record keeps its result
(``result``, ``result_id``) for the dedupe window.
"""

from __future__ import annotations

from typing import Any

from tasks.base.events import dumps, embedded_json
from tasks.state.partition import OutcomeReply, Partition, outcome_reply
from tasks.state.scripts import ScriptCall


class PublishedResults:
    """The results stream, written only through the publish and reject scripts."""

    def __init__(self, partition: Partition) -> None:
        self._partition = partition

    def _keys(self, request_id: str) -> list[str]:
        k = self._partition.keys
        return [k.request(request_id), k.results, k.events, k.parked, k.outbox]

    def publish_call(
        self,
        request_id: str,
        status: str,
        *,
        seq: int,
        attempt: int,
        result_digest: str,
        rejected_data: str = "",
    ) -> ScriptCall[OutcomeReply]:
        """Publish the recorded decision's terminal result once (see ``publish.lua``)."""
        p = self._partition
        s = p.settings
        args = [
            *p.meta().argv(), request_id, status, seq, attempt, result_digest,
            s.results_maxlen, s.request_ttl_s, p.now_ms(), rejected_data,
        ]
        return ScriptCall("publish", self._keys(request_id), args, outcome_reply)

    def reject(
        self,
        request_id: str,
        *,
        request_json: str,
        request_digest: str,
        result_json: str,
        result_digest: str,
        error: dict[str, Any] | None,
    ) -> OutcomeReply:
        """Publish the edge rejection of an invalid request, only if the id is new (``reject.lua``).

        Returns:
            ``("published", results entry id)``; ``("duplicate", state)`` when the
            id is known with the same request; ``("conflict", stored digest)``
            when it is known with a different one.
        """
        p = self._partition
        s = p.settings
        received = dumps(
            {"digest": request_digest, "request": embedded_json(request_json), "reschedule_of": ""}
        )
        reply = p.run(
            "reject",
            self._keys(request_id),
            [
                *p.meta().argv(), request_id, request_json, request_digest, result_json,
                result_digest, received, dumps({"error": error}), s.results_maxlen,
                s.request_ttl_s, p.now_ms(),
            ],
        )
        if reply[0] == "conflict":
            return "conflict", reply[2]
        return outcome_reply(reply)
