"""Per-process mirror of the cluster: validated rows kept in memory, updated by deltas.

A decision needs every worker and instance as pydantic objects; re-reading and
re-validating a 2,000-worker cluster per decision would dominate the cost. The
mirror reads the full state once (atomically, with the version and the
position in the changes stream), then applies only the changes recorded
since, through the same :class:`~tasks.state.fold.ClusterFold` the replay uses. A
gap in the changes stream (trimmed, or a version that does not follow) falls
back to a full read. After :meth:`ClusterMirror.sync` the fold is a
consistent snapshot at ``fold.version``.

A batch of decisions (:mod:`tasks.decision.batch`) books ahead: each booking
it decides is applied to the fold at the next version
(:meth:`ClusterMirror.book_ahead`) before it is committed, so the batch's next
decision sees it as it would after a commit; once the commit's replies are in,
:meth:`ClusterMirror.settle` keeps them (each booked at the version foreseen:
the stream's entries for them are then skipped) or takes them back.
"""

from __future__ import annotations

import json
from typing import Any

from scheduler_core import ModelInstance, Worker
from tasks.base.rows import parse_meta
from tasks.state.cluster_store import ClusterStore
from tasks.state.fold import RESERVATION_BOOKED, ClusterFold, decode_data
from tasks.state.scripts import Batch, Pending
from tasks.state.streams import read_range

#: Changes read per round trip while catching up.
PAGE = 500
#: Entries of the changes stream: ``(entry id, fields)``.
Entries = list[tuple[str, dict[str, str]]]
#: What :meth:`ClusterMirror.read_changes` reads: the cluster version, then the entries after it.
Changes = tuple[int, Entries]


def _entries(reply: Any) -> Entries:
    return [(str(entry_id), dict(fields)) for entry_id, fields in reply]


def _version(reply: Any) -> int:
    return int(reply or 0)


class ChangesRead:
    """The two replies of :meth:`ClusterMirror.read_changes`, available once the batch executed."""

    __slots__ = ("_entries", "_version")

    def __init__(self, version: Pending[int], entries: Pending[Entries]) -> None:
        self._version, self._entries = version, entries

    @property
    def value(self) -> Changes:
        """(cluster version, changes after the mirror's position)."""
        return self._version.value, self._entries.value


class ClusterMirror:
    """A consistent, incrementally maintained copy of one partition's cluster."""

    def __init__(self, cluster: ClusterStore) -> None:
        self.cluster = cluster
        self.fold = ClusterFold()
        self.last_id: str | None = None
        #: Bookings applied ahead of their commit: version → (instance key, the data sent).
        self._ahead: dict[int, tuple[str, str]] = {}
        #: Bookings applied ahead and committed, whose stream entries are still to come.
        self._settled: dict[int, tuple[str, str]] = {}

    def reload(self) -> ClusterFold:
        """Read the whole state again (first use, or a gap in the changes stream)."""
        version, last_id, workers, instances, metas = self.cluster.read_state()
        self._ahead, self._settled = {}, {}
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

    def read_changes(self, batch: Batch) -> ChangesRead | None:
        """Queue the reads :meth:`sync` starts with (None before the first full read).

        Lets a caller fetch the cluster version and the changes in the same
        round trip as other work; pass the value to :meth:`sync`.
        """
        if self.last_id is None:
            return None
        keys = self.cluster.keys
        version = batch.command(_version, "GET", keys.version)
        start = f"({self.last_id}"
        entries = batch.command(_entries, "XRANGE", keys.changes, start, "+", "COUNT", PAGE)
        return ChangesRead(version, entries)

    def sync(self, first_page: Changes | None = None) -> ClusterFold:
        """Bring the fold up to the latest recorded version and return it.

        A Redis that went back in time (an AOF that lost its tail, a failover to
        a lagging replica) shows as a cluster version below the fold's, as a
        new change whose version the fold already has, or (with ``first_page``)
        as a cluster version the changes after the position do not reach:
        each reloads the state.

        Args:
            first_page: the value of :meth:`read_changes` when the caller
                already read it (read at or after the state it must see).
        """
        if self.last_id is None:
            return self.reload()
        stream = self.cluster.keys.changes
        entries = None
        current = None
        if first_page is not None:
            current, entries = first_page
            if current < self.fold.version:
                return self.reload()
        while True:
            if entries is None:
                entries = read_range(self.cluster.client, stream, f"({self.last_id}", PAGE)
            for entry_id, fields in entries:
                if not self._apply(fields):
                    return self.reload()
                self.last_id = entry_id
            if len(entries) < PAGE:
                # Every version up to the one read first is on the stream after the
                # position (each is written with its change); one missing means the new
                # timeline's entries sort before the position (a clock behind).
                if current is not None and self.fold.version < current:
                    return self.reload()
                return self.fold
            entries = None

    def book_ahead(self, booked_data: str) -> None:
        """Apply a booking not yet committed at the next version (its change's data JSON)."""
        version = self.fold.version + 1
        data = decode_data(booked_data)
        self.fold.apply_change(RESERVATION_BOOKED, version, data, self.cluster.snapshot_rows)
        self._ahead[version] = (str(data["instance_key"]), booked_data)

    def settle(self, *, committed: bool) -> None:
        """Keep the bookings applied ahead (``committed``: each booked at its version), or undo them.

        Undone, the fold is back at the version it was synced to, and the next
        :meth:`sync` applies whatever the stream recorded meanwhile.
        """
        if not self._ahead:
            return
        if committed:
            self._settled.update(self._ahead)
        else:
            self.fold.apply_released(min(self._ahead) - 1, [key for key, _ in self._ahead.values()])
        self._ahead = {}

    def _apply(self, fields: dict[str, str]) -> bool:
        version = int(fields["version"])
        if version in self._settled:  # already in the fold: booked ahead, then committed
            _, data = self._settled.pop(version)
            # reserve.lua records the booking's data as it was sent: the very same text says it
            # is this booking (anything else, even the same key booked otherwise, reloads)
            return fields["type"] == RESERVATION_BOOKED and fields["data"] == data
        if version != self.fold.version + 1:
            # A change after the position the state was read at always follows
            # its version; anything else is a gap, or Redis went back in time.
            return False
        try:
            self.fold.apply_change(
                fields["type"], version, decode_data(fields["data"]), self.cluster.snapshot_rows
            )
        except (LookupError, ValueError, json.JSONDecodeError):
            return False
        return True
