"""Place mode: every ``pending`` GPUStack instance without a worker is placed by gpusched.

:class:`Placer` reconciles one instance at a time, level-triggered (kube's controllers): it
reads GPUStack's row (the mirror) and gpusched's record of the instance's request chain
(:class:`~tasks.edges.gpustack_bridge.gpusched_side.Desired`) and writes the difference:

* a pending instance gpusched has never seen: submit its request (deterministic id);
* ``placed``: write the placement unless the row already holds it — a first placement or
  gpusched's move off a lost worker (the row holds an earlier link of the chain);
* ``unschedulable``: GPUStack's ``state_message`` (the request stays parked in gpusched and is
  placed when the cluster changes; the next reconcile writes that);
* ``rejected``: ``state: error`` with the reason;
* a deleted instance: cancel its request (a booking is released, a parked request withdrawn).

A row that holds a placement gpusched did not make while gpusched has a request for it was
placed by another scheduler (GPUStack's own, if it runs): reported, the request cancelled,
and the instance counted as GPUStack's from then on (never twice).

Every write is idempotent (nothing is written when the row already says it), so a
restarted bridge, a redelivered result and a periodic full pass all converge on the same
rows. A write GPUStack fails with a 5xx, 408, 409 or 429 (or does not answer) raises, and
the caller retries the instance later; one it refuses (any other 4xx but 404) is reported
once (``gpustack.write_refused``) and that body is not sent again for that row (the
instance's next reconcile sends only a body that differs: another placement, a row whose
identity changed); the evaluation of a model GPUStack refused is still submitted with the
request. The refused bodies are kept in memory: a restarted bridge tries each once more.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from tasks.edges.gpustack_bridge import metrics, writeback
from tasks.edges.gpustack_bridge.api import GpustackApi, HttpStatus
from tasks.edges.gpustack_bridge.evaluate import evaluation
from tasks.edges.gpustack_bridge.gpusched_side import Desired, GpuschedSide
from tasks.edges.gpustack_bridge.ids import request_id
from tasks.edges.gpustack_bridge.keys import BridgeKeys
from tasks.edges.gpustack_bridge.rows import RowRefused, model_row

log = structlog.get_logger("gpusched.gpustack")
Row = dict[str, Any]
INSTANCES = "model-instances"


@dataclass
class Placer:
    """Reconciles GPUStack instances of one cluster with one gpusched partition."""

    api: GpustackApi
    side: GpuschedSide
    rows: dict[str, dict[int, Row]]
    cluster_id: int
    keys: BridgeKeys
    model_roots: tuple[str, ...]
    evaluated: set[int] = field(default_factory=set)
    #: (kind, row id) → the body GPUStack last refused for that row (never sent again).
    refused: dict[tuple[str, int], Row] = field(default_factory=dict)

    # ------------------------------------------------------------------ entry points
    def reconcile(self, instance_id: int) -> None:
        """Bring one instance and its request in line (see the module docstring)."""
        row = self.rows[INSTANCES].get(instance_id)
        if row is None or row.get("cluster_id") not in (None, self.cluster_id):
            return
        rid = request_id(self.cluster_id, row)
        if self.is_foreign(instance_id):
            return
        desired = self.side.desired(rid)
        if desired.kind == "unknown":
            # analyzing: left half-evaluated by GPUStack's own scheduler before it was switched off
            if row.get("worker_id") is None and row.get("state") in ("pending", "analyzing"):
                self._submit(row, rid)
            return
        self._converge(row, desired)

    def deleted(self, before: Row) -> None:
        """The instance ``before`` is gone: withdraw its request (idempotent)."""
        rid = request_id(self.cluster_id, before)
        self.refused.pop((INSTANCES, int(before["id"])), None)
        self.side.client.rt.client.hdel(self.keys.foreign, str(before["id"]))
        if self.side.known(rid):
            status = self.side.cancel(rid)
            metrics.CANCELLED.inc()
            log.info("gpustack.instance_deleted", instance=before["id"], request_id=rid, cancel=status)

    def is_foreign(self, instance_id: int) -> bool:
        return bool(self.side.client.rt.client.hexists(self.keys.foreign, str(instance_id)))

    # ------------------------------------------------------------------ submit
    def model(self, model_id: Any) -> Row | None:
        """The model row (the mirror's, else read from GPUStack)."""
        if isinstance(model_id, int) and model_id in self.rows["models"]:
            return self.rows["models"][model_id]
        raw = self.api.get_row("models", int(model_id)) if isinstance(model_id, int) else None
        if raw is None:
            return None
        try:
            return model_row(raw)
        except RowRefused as error:
            log.warning("gpustack.row_refused", kind="model", field=error.field, error=str(error))
            return None

    def _submit(self, row: Row, rid: str) -> None:
        model = self.model(row.get("model_id"))
        if model is None:
            return  # the model row arrives on its own stream; the next reconcile submits
        changes = evaluation(model, self.model_roots)
        if changes:
            model = {**model, **changes}
            self._write_evaluation(model["id"], changes)
        status = self.side.submit({"request_id": rid, "policy": "gpustack", "model": model})
        metrics.SUBMITTED.inc()
        log.info("gpustack.submitted", instance=row["id"], request_id=rid, status=status)

    def _write_evaluation(self, model_id: int, changes: Row) -> None:
        """GPUStack's evaluation writes what it found to the model row: so do we, once per model,
        each field only while GPUStack's row still lacks it."""
        if model_id in self.evaluated:
            return
        current = self.api.get_row("models", model_id)
        if current is None:
            return
        body = {key: value for key, value in changes.items() if not _evaluated(current, key)}
        if body:
            identity = {k: current[k] for k in writeback.IDENTITY_FIELDS if current.get(k) is not None}
            self._put("models", model_id, {**identity, **body}, "evaluation")
        self.evaluated.add(model_id)  # written, or refused and reported: the request carries it

    # ------------------------------------------------------------------ converge
    def _converge(self, row: Row, desired: Desired) -> None:
        current = writeback.placement_of_row(row)
        earlier = [writeback.placement_of_result(h) for h in desired.history]
        if desired.kind == "placed" and desired.result is not None:
            if current == writeback.placement_of_result(desired.result):
                return
            if current is None or current in earlier:  # not written yet, or gpusched moved it
                self._write_placement(row, desired)
            else:
                self._overwritten(row, desired)
        elif current is not None and current not in earlier and desired.kind in ("waiting", "unschedulable"):
            self._overwritten(row, desired)
        elif desired.kind == "unschedulable" and desired.result is not None:
            self._write_unschedulable(row, desired.result)
        elif desired.kind == "rejected" and desired.result is not None:
            self._write_rejected(row, desired.result)

    def _put(self, kind: str, row_id: int, body: Row, what: str) -> bool:
        """``PUT`` ``body`` to one row; whether GPUStack stored it.

        Raises:
            GpustackError: a retryable failure (5xx, 408, 409, 429, no answer): try again later.
        """
        if self.refused.get((kind, row_id)) == body:
            return False  # GPUStack refused this very body: reported once, not sent again
        try:
            self.api.put_row(kind, row_id, body)
        except HttpStatus as error:
            metrics.WRITE_ERRORS.labels(str(error.status)).inc()
            if error.status == 404:  # deleted meanwhile: its DELETE event cancels the request
                return False
            if error.retryable:
                raise
            self._refused(kind, row_id, body, what, error)
            return False
        self.refused.pop((kind, row_id), None)
        metrics.WRITES.labels(what).inc()
        return True

    def _refused(self, kind: str, row_id: int, body: Row, what: str, error: HttpStatus) -> None:
        """422 and the like: the same body cannot succeed; say so once and keep it from being resent."""
        self.refused[(kind, row_id)] = body
        where = {"instance": row_id} if kind == INSTANCES else {"model": row_id}
        log.error(
            "gpustack.write_refused",
            **where,
            what=what,
            error=str(error),
            hint="not sent again with this body (docs/gpustack.md, Faults)",
        )

    def _write_placement(self, row: Row, desired: Desired) -> None:
        assert desired.result is not None
        model = self.model(row.get("model_id")) or {}
        workers = self.rows["workers"]
        body = writeback.placement_body(row, desired.result, workers, model.get("backend"))
        moved = writeback.placement_of_row(row) is not None
        if not self._put(INSTANCES, row["id"], body, "move" if moved else "placement"):
            return
        if not moved:
            created = _created(row)
            if created is not None:
                metrics.PLACE_LATENCY.observe(max(0.0, time.time() - created))
        log.info(
            "gpustack.placed",
            instance=row["id"],
            request_id=desired.request_id,
            moved=moved,
            worker=body["worker_id"],
            gpus=body["gpu_indexes"],
        )

    def _write_unschedulable(self, row: Row, result: Row) -> None:
        message = writeback.state_message_of(result)
        if row.get("state") == "pending" and row.get("state_message") == message:
            return
        self._put(INSTANCES, row["id"], writeback.unschedulable_body(row, result), "unschedulable")

    def _write_rejected(self, row: Row, result: Row) -> None:
        message = writeback.state_message_of(result)
        if row.get("state") == "error" and row.get("state_message") == message:
            return
        self._put(INSTANCES, row["id"], writeback.rejected_body(row, result), "rejected")

    def _overwritten(self, row: Row, desired: Desired) -> None:
        """Another scheduler placed the instance: count it as GPUStack's, release gpusched's request."""
        self.side.client.rt.client.hset(self.keys.foreign, str(row["id"]), desired.request_id)
        status = self.side.cancel(desired.request_id)
        metrics.OVERWRITTEN.inc()
        log.error(
            "gpustack.placement_overwritten",
            instance=row["id"],
            request_id=desired.request_id,
            worker=row.get("worker_id"),
            cancel=status,
            hint="another scheduler places this cluster's instances: is GPUStack's scheduler off?",
        )


def _created(row: Row) -> float | None:
    text = row.get("created_at")
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _evaluated(row: Row, key: str) -> bool:
    """Whether GPUStack's model row already holds ``key``'s evaluated value."""
    if key == "gpu_selector":
        return bool(((row.get("gpu_selector") or {}).get("gpus_per_replica") or 0) > 0)
    return bool(row.get(key))
