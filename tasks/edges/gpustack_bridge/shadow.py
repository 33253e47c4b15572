"""Shadow mode: gpusched decides every instance GPUStack's own scheduler places, and says whether
it agrees — never writing to GPUStack.

GPUStack's scheduler moves an instance ``analyzing`` → ``scheduled`` (or back to ``pending``
with ``"No suitable workers..."``) in one write; :class:`Shadow` sees that update on the
instance watch *before* applying it to the mirror, so the mirror still holds the rows
GPUStack decided on: every worker, and every instance — the one being placed included, as
it was (``analyzing``, with its old placement when GPUStack re-places it), as
``ModelInstance.all()`` gives them to ``find_candidate``. gpusched's core decides the same
request in process (no booking: shadow mode changes nothing in gpusched either), and the
comparison — worker, GPU type and indexes, per-GPU claims, ``vram_utilization``,
subordinate workers, or the unschedulable text — is recorded as an entry of the shadow
stream, a count per verdict, and the metric ``gpusched_gpustack_shadow_decisions_total``.
``gpusched gpustack report`` prints them.

The workers come on their own watch stream, another connection than the instances': a
worker's update GPUStack's scheduler read (a heartbeat lost: ``not_ready``) may reach the
mirror after the decision it made. A decision that differs is therefore compared once more
on the workers as GPUStack holds them now (read from its API) when they are not the
mirror's; if that comparison agrees, the difference was the mirror's lag, not the
placement: the verdict is that comparison's, and the entry says the workers were read again
(``reread``) and which of them the mirror held otherwise (``stale_workers``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, cast

import redis
import structlog

from scheduler_core import ModelSpec, schedule
from tasks.edges.gpustack_bridge import metrics, writeback
from tasks.edges.gpustack_bridge.api import GpustackApi, GpustackError, WatchEvent
from tasks.edges.gpustack_bridge.follow import Mirror
from tasks.edges.gpustack_bridge.ids import request_id
from tasks.edges.gpustack_bridge.keys import SHADOW_MAXLEN, BridgeKeys
from tasks.edges.gpustack_bridge.rows import RowRefused, claims_view, model_row
from tasks.intake.requests import local_path_problem

log = structlog.get_logger("gpusched.gpustack")
Row = dict[str, Any]
AGREE, TIE, DIFFER, SKIPPED = "agree", "tie", "differ", "skipped"
#: The count of decisions that agreed (or tied) only on GPUStack's workers read again.
REREAD = "reread"


def gpustack_decided(before: Row | None, event: WatchEvent) -> bool:
    """Whether ``event`` is GPUStack's scheduler writing a decision (from ``analyzing``)."""
    if event.type != 2 or before is None or before.get("state") != "analyzing":
        return False
    state = event.row.get("state")
    return state == "scheduled" or (state == "pending" and bool(event.row.get("state_message")))


def _theirs(row: Row) -> Row:
    if row.get("state") == "scheduled":
        return {"status": "scheduled", "placement": writeback.placement_of_row(row)}
    return {"status": "unschedulable", "state_message": row.get("state_message")}


def _ours(result: Row) -> Row:
    if result.get("status") == "scheduled":
        return {"status": "scheduled", "placement": writeback.placement_of_result(result)}
    if result.get("status") == "unschedulable":
        return {"status": "unschedulable", "state_message": writeback.state_message_of(result)}
    return {"status": str(result.get("status")), "error": result.get("error")}


def _tied(result: Row, theirs: Row) -> bool:
    """GPUStack picked another candidate of the same, highest score.

    Its pick among equal scores is the first candidate in the order of its worker rows, and
    ``Worker.all()`` reads them without ``ORDER BY``: PostgreSQL's heap order, which every
    status update of a worker changes. gpusched orders workers by id. Both picks are then
    equally right, and which one GPUStack makes cannot be known from its API.
    """
    if result.get("status") != "scheduled" or theirs.get("status") != "scheduled":
        return False
    candidates = result.get("candidates") or []
    best = candidates[result["selected"]].get("score")
    return any(
        c.get("score") == best and writeback.placement_of_candidate(c) == theirs["placement"]
        for c in candidates
    )


def _by_id(rows: dict[int, Row]) -> list[Row]:
    """The rows in id order (how gpusched takes a mirror's workers)."""
    return [row for _, row in sorted(rows.items())]


def differing(ours: Row, theirs: Row) -> list[str]:
    """The parts that differ (``status``, ``placement.<field>``, ``state_message``)."""
    if ours.get("status") != theirs.get("status"):
        return ["status"]
    if ours["status"] == "scheduled":
        mine, other = ours["placement"] or {}, theirs["placement"] or {}
        return [f"placement.{k}" for k in sorted(set(mine) | set(other)) if mine.get(k) != other.get(k)]
    return ["state_message"] if ours.get("state_message") != theirs.get("state_message") else []


@dataclass
class Shadow:
    """Compares GPUStack's decisions with gpusched's, recording each in Redis."""

    rows: dict[str, dict[int, Row]]
    cluster_id: int
    client: redis.Redis
    keys: BridgeKeys
    model_roots: tuple[str, ...]
    api: GpustackApi | None = None

    def observe(self, before: Row | None, event: WatchEvent) -> str | None:
        """Compare one GPUStack decision (call before the event reaches the mirror); the verdict."""
        if not gpustack_decided(before, event) or before is None:
            return None
        if event.row.get("cluster_id") not in (None, self.cluster_id):
            return None
        request = self._request(before)
        if request is None:
            return self._record(before, event.row, SKIPPED, None, ["model"])
        theirs = _theirs(event.row)
        verdict, ours, fields = self._compare(request, theirs)
        stale: list[int] = []
        if verdict == DIFFER:
            again = self._reread(request, theirs)
            if again is not None:
                (verdict, ours, fields), stale = again
                log.info("gpustack.shadow_mirror_lagged", instance=before["id"], workers=stale)
        return self._record(before, event.row, verdict, ours, fields, stale)

    @staticmethod
    def _compare(request: Row, theirs: Row) -> tuple[str, Row, list[str]]:
        """gpusched's decision of ``request`` against GPUStack's: (verdict, ours, fields that differ)."""
        result = json.loads(schedule(request).model_dump_json())
        ours = _ours(result)
        fields = differing(ours, theirs)
        return AGREE if not fields else TIE if _tied(result, theirs) else DIFFER, ours, fields

    def _reread(self, request: Row, theirs: Row) -> tuple[tuple[str, Row, list[str]], list[int]] | None:
        """The comparison on GPUStack's workers as it holds them now, and the ids of those the
        mirror held otherwise, when they differ and that comparison agrees (or ties); else None
        (no API, the workers unreadable or the mirror's, or a difference still)."""
        if self.api is None:
            return None
        try:
            listed = self.api.list_rows("workers")
        except GpustackError as error:
            log.warning("gpustack.shadow_workers_unread", error=str(error))
            return None
        now = Mirror(rows={"workers": {row["id"]: row for row in request["workers"]}})
        stale = [change.id for change in now.resync("workers", listed)]  # reduced as the mirror does
        if not stale:
            return None
        again = self._compare({**request, "workers": _by_id(now.rows["workers"])}, theirs)
        return None if again[0] == DIFFER else (again, stale)

    def _model(self, model_id: Any) -> Row | None:
        """The model row as GPUStack's evaluation left it: read again, since the models stream
        may deliver that update after the instance's (another connection); the mirror's else."""
        if self.api is not None and isinstance(model_id, int):
            try:
                raw = self.api.get_row("models", model_id)
                return model_row(raw) if raw is not None else None
            except (GpustackError, RowRefused) as error:
                log.warning("gpustack.shadow_model_unread", model=model_id, error=str(error))
        return self.rows["models"].get(model_id)

    def _request(self, instance: Row) -> Row | None:
        model = self._model(instance.get("model_id"))
        if model is None or local_path_problem(ModelSpec.model_validate(model), self.model_roots):
            return None
        return {
            "request_id": request_id(self.cluster_id, instance),
            "policy": "gpustack",
            "model": model,
            "workers": _by_id(self.rows["workers"]),
            "model_instances": [claims_view(row) for _, row in sorted(self.rows["model-instances"].items())],
        }

    def _record(
        self, before: Row, after: Row, verdict: str, ours: Row | None, fields: list[str],
        stale: list[int] | None = None,
    ) -> str:
        entry = {
            "instance_id": str(before["id"]),
            "instance": str(before.get("name")),
            "model_id": str(before.get("model_id")),
            "verdict": verdict,
            "fields": json.dumps(fields),
            "gpustack": json.dumps(_theirs(after), sort_keys=True),
            "gpusched": json.dumps(ours, sort_keys=True),
            "time_ms": str(int(time.time() * 1000)),
        }
        if stale:
            entry["reread"] = "workers"
            entry["stale_workers"] = json.dumps(stale)
        pipe = self.client.pipeline(transaction=False)
        pipe.xadd(self.keys.shadow, entry, maxlen=SHADOW_MAXLEN, approximate=True)  # type: ignore[arg-type]
        pipe.hincrby(self.keys.shadow_counts, verdict, 1)
        if stale:
            pipe.hincrby(self.keys.shadow_counts, REREAD, 1)
        pipe.execute()
        metrics.SHADOW.labels(verdict).inc()
        log.info("gpustack.shadow", instance=before["id"], verdict=verdict, differs=fields)
        return verdict


def report(client: redis.Redis, keys: BridgeKeys, limit: int) -> Row:
    """The shadow record of one GPUStack cluster: counts and the latest differences."""
    stored = cast(dict[str, str], client.hgetall(keys.shadow_counts))
    counts = {str(k): int(v) for k, v in stored.items()}
    entries = cast(
        list[tuple[str, dict[str, str]]], client.xrevrange(keys.shadow, count=max(limit * 20, 100))
    )
    differences: list[Row] = []
    for entry_id, fields in entries:
        if fields.get("verdict") not in (AGREE, TIE) and len(differences) < limit:
            differences.append(
                {
                    "id": entry_id,
                    **{k: fields[k] for k in ("instance_id", "instance", "verdict")},
                    "fields": json.loads(fields["fields"]),
                    "gpustack": json.loads(fields["gpustack"]),
                    "gpusched": json.loads(fields["gpusched"]),
                }
            )
    decided = sum(counts.get(verdict, 0) for verdict in (AGREE, TIE, DIFFER))
    return {
        "cluster_id": keys.cluster_id,
        "decisions": decided,
        "agree": counts.get(AGREE, 0),
        "tie": counts.get(TIE, 0),
        "differ": counts.get(DIFFER, 0),
        "skipped": counts.get(SKIPPED, 0),
        "reread": counts.get(REREAD, 0),
        "differences": differences,
    }
