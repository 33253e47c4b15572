"""What a snapshot would change, without changing it (``gpusched cluster apply --dry-run``).

Compared with one atomic read of the stored cluster: workers added, removed
and changed (their stored row differs); the control plane's instances added,
removed and changed (by instance key); gpusched's bookings kept, taken over,
or dropped because a worker they occupy is not in the snapshot (those are
rescheduled, or held back by the mass-outage guard); and whether the removal
needs confirmation (``max_removed_fraction``, ``allow_removal``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tasks.base.rows import parse_meta, row_json
from tasks.intake.snapshots import SnapshotRows
from tasks.state.cluster_store import removal_refusal
from tasks.state.context import Runtime


def diff_snapshot(rt: Runtime, rows: SnapshotRows, *, allow_removal: bool = False) -> dict[str, Any]:
    """The changes applying ``rows`` would make now (nothing is written)."""
    _, _, stored_workers, stored_instances, metas = rt.cluster.read_state()
    new_workers = {str(worker.id): row_json(worker) for worker in rows.workers}
    new_instances = {key: row_json(instance) for key, instance in rows.instances}
    control_plane = {key: row for key, row in stored_instances.items()
                     if key in metas and parse_meta(metas[key]).source != "gpusched"}
    removed = sorted(set(stored_workers) - set(new_workers), key=int)
    limit = rt.settings.max_removed_fraction
    refusal = removal_refusal(stored_workers, new_workers, limit, allow_removal=False)
    return {
        "dry_run": True,
        "applies": allow_removal or refusal is None,
        "workers": _compare(stored_workers, new_workers, numeric=True),
        "instances": _compare(control_plane, new_instances, numeric=False),
        "bookings": _bookings(metas, set(new_workers)),
        "removal": {
            "removes": len(removed), "of": len(stored_workers), "max_removed_fraction": limit,
            "needs_allow_removal": refusal is not None,
        },
    }


def _compare(old: Mapping[str, str], new: Mapping[str, str], *, numeric: bool) -> dict[str, Any]:
    def order(keys: set[str]) -> list[Any]:
        return sorted((int(k) for k in keys), key=int) if numeric else sorted(keys)

    common = set(old) & set(new)
    changed = {key for key in common if old[key] != new[key]}
    return {
        "added": order(set(new) - set(old)),
        "removed": order(set(old) - set(new)),
        "changed": order(changed),
        "unchanged": len(common) - len(changed),
    }


def _bookings(metas: Mapping[str, str], present: set[str]) -> dict[str, Any]:
    kept: list[str] = []
    dropped: list[str] = []
    for key in sorted(metas):
        meta = parse_meta(metas[key])
        if meta.source != "gpusched":
            continue
        alive = all(str(w) in present for w in meta.workers)
        (kept if alive else dropped).append(meta.request_id or key)
    return {"kept": len(kept), "dropped": dropped}

