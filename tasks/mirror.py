"""Per-process mirror of the cluster: validated rows kept in memory, updated by deltas.

A decision needs every worker and instance as pydantic objects; re-reading and
re-validating a 2,000-worker cluster per decision would dominate the cost. The
mirror reads the full state once (atomically, with the version and the
position in the changes stream), then applies only the changes recorded
since, through the same :class:`~tasks.fold.ClusterFold` the replay uses. A
gap in the changes stream (trimmed, or a version that does not follow) falls
back to a full read. After :meth:`ClusterMirror.sync` the fold is a
consistent snapshot at ``fold.version``.
"""

from __future__ import annotations

import json
from typing import Any

from scheduler_core import ModelInstance, Worker
from tasks.cluster_store import ClusterStore, parse_meta
from tasks.fold import ClusterFold, decode_data
from tasks.scripts import Batch, Pending
from tasks.streams import read_range

#: Changes read per round trip while catching up.
PAGE = 500
#: Entries of the changes stream: ``(entry id, fields)``.
Entries = list[tuple[str, dict[str, str]]]


def _entries(reply: Any) -> Entries:
    return [(str(entry_id), dict(fields)) for entry_id, fields in reply]


class ClusterMirror:
    """A consistent, incrementally maintained copy of one partition's cluster."""

    def __init__(self, cluster: ClusterStore) -> None:
        self.cluster = cluster
        self.fold = ClusterFold()
        self.last_id: str | None = None

    def reload(self) -> ClusterFold:
        """Read the whole state again (first use, or a gap in the changes stream)."""
        version, last_id, workers, instances, metas = self.cluster.read_state()
        self.fold.load(
            version,
            (Worker.model_validate_json(row) for row in workers.values()),
            (
                (key, ModelInstance.model_validate_json(row), parse_meta(metas[key]))
                for key, row in instances.items()
                if key in metas
            ),
        )
        self.last_id = last_id
        return self.fold

    def read_changes(self, batch: Batch) -> Pending[Entries] | None:
        """Queue the read :meth:`sync` starts with (None before the first full read).

        Lets a caller fetch the changes in the same round trip as other work;
        pass the reply to :meth:`sync`.
        """
        if self.last_id is None:
            return None
        start = f"({self.last_id}"
        return batch.command(_entries, "XRANGE", self.cluster.keys.changes, start, "+", "COUNT", PAGE)

    def sync(self, first_page: Entries | None = None) -> ClusterFold:
        """Bring the fold up to the latest recorded version and return it.

        Args:
            first_page: the reply of :meth:`read_changes` when the caller
                already read it (read at or after the state it must see).
        """
        if self.last_id is None:
            return self.reload()
        stream = self.cluster.keys.changes
        entries = first_page
        while True:
            if entries is None:
                entries = read_range(self.cluster.client, stream, f"({self.last_id}", PAGE)
            for entry_id, fields in entries:
                if not self._apply(fields):
                    return self.reload()
                self.last_id = entry_id
            if len(entries) < PAGE:
                return self.fold
            entries = None

    def _apply(self, fields: dict[str, str]) -> bool:
        version = int(fields["version"])
        if version <= self.fold.version:
            return True  # already part of the state read by reload()
        if version != self.fold.version + 1:
            return False
        try:
            self.fold.apply_change(
                fields["type"], version, decode_data(fields["data"]), self.cluster.snapshot_rows
            )
        except (LookupError, ValueError, json.JSONDecodeError):
            return False
        return True
