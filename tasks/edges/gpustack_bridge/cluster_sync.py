"""Place mode: GPUStack's workers become gpusched's cluster, GPUStack's own instances its instances.

The first sync (and any change to the set of instances gpusched did not place) applies a
snapshot — ``{"workers": [...], "model_instances": [...]}`` with the reduced worker rows and
the *foreign* instances only: those GPUStack placed itself (before the switch, by hand, or
by its own scheduler over gpusched's, see :mod:`tasks.edges.gpustack_bridge.place`). An
instance gpusched placed is never listed: gpusched books it itself, so listing its row too
would count its GPUs twice. Afterwards each changed worker row is one cluster event
(``worker_added``, ``worker_updated``, ``worker_removed``), applied in this process so a
request submitted next is decided on it. A worker that GPUStack reports ``not_ready`` or
``unreachable`` arrives as its row's ``state``; gpusched's outage clock and hysteresis
decide when its placements move.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import structlog

from tasks.edges.gpustack_bridge.ids import request_id
from tasks.edges.gpustack_bridge.place import INSTANCES, Placer
from tasks.edges.gpustack_bridge.rows import claims_view
from tasks.state.cluster_store import RemovalRefused

log = structlog.get_logger("gpusched.gpustack")
Row = dict[str, Any]


@dataclass
class ClusterSync:
    placer: Placer
    sent_workers: dict[int, Row] | None = None
    sent_foreign: list[Row] = field(default_factory=list)

    def _workers(self) -> dict[int, Row]:
        cluster = self.placer.cluster_id
        return {
            i: r for i, r in sorted(self.placer.rows["workers"].items()) if r.get("cluster_id") == cluster
        }

    def foreign_instances(self) -> list[Row]:
        """Instances of this cluster holding GPUs that gpusched did not place, by id."""
        placer, side = self.placer, self.placer.side
        out: list[Row] = []
        for ident, row in sorted(placer.rows[INSTANCES].items()):
            if row.get("worker_id") is None or row.get("cluster_id") not in (None, placer.cluster_id):
                continue
            if placer.is_foreign(ident) or not side.known(request_id(placer.cluster_id, row)):
                out.append(claims_view(row))
        return out

    def sync(self) -> None:
        """Send what changed since the last sync (idempotent: nothing when nothing changed)."""
        workers, foreign = self._workers(), self.foreign_instances()
        if self.sent_workers is None or foreign != self.sent_foreign:
            self._snapshot(workers, foreign)
            return
        for ident in sorted(set(self.sent_workers) | set(workers)):
            before, after = self.sent_workers.get(ident), workers.get(ident)
            if before != after:
                self._event(ident, before, after)

    def _snapshot(self, workers: dict[int, Row], foreign: list[Row]) -> None:
        document = {"workers": list(workers.values()), "model_instances": foreign}
        try:
            summary = self.placer.side.client.apply_cluster(document)
        except RemovalRefused as error:
            log.error(
                "gpustack.snapshot_refused",
                error=str(error),
                hint="GPUStack lists far fewer workers than gpusched holds; confirm with "
                "gpusched cluster apply --allow-removal if that is meant",
            )
            return
        self.sent_workers, self.sent_foreign = dict(workers), foreign
        log.info(
            "gpustack.snapshot_applied",
            workers=len(workers),
            foreign_instances=len(foreign),
            version=summary.get("version"),
        )

    def _event(self, ident: int, before: Row | None, after: Row | None) -> None:
        assert self.sent_workers is not None
        if after is None:
            event: Row = {"kind": "worker_removed", "worker_id": ident}
        else:
            event = {"kind": "worker_updated" if before is not None else "worker_added", "worker": after}
        summary = self.placer.side.client.cluster_event(event, queue=False)
        if summary.get("status") == "rejected":
            log.error(
                "gpustack.cluster_event_refused",
                worker=ident,
                field=summary.get("field"),
                error=summary.get("error"),
            )
        if after is None:
            self.sent_workers.pop(ident, None)
        else:
            self.sent_workers[ident] = after
