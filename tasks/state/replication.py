"""Acknowledged writes: what reached a replica, and the position readers may read up to.

Redis replicates asynchronously, so a result, a booking or a cluster change
is on the master before it is on a replica, and a failover to a replica that
lacked it loses it. Nothing the service writes is acknowledged to anyone
until a replica holds it (``replicas_required`` ≥ 1, the default through
Sentinel; see ``docs/service.md``, *Failover*):

* **the writer** — after its writes, :meth:`Replication.acknowledge` sends one
  mark (``mark.lua``: a write that reads the last entry of each acknowledged
  stream, the cluster version and the generation) with ``WAIT`` behind it on
  the same connection. ``WAIT`` covers the connection's last write, and
  replication is one ordered stream, so a replica that has the mark has every
  write made before it, by any process. Only then is the mark's position
  stored as ``gpusched:acked`` (``advance.lua``).
* **readers** — a result reader, ``ServiceClient.wait``, the results consumer
  group helper and ``gpusched replay`` read a stream only up to the stored
  position (:meth:`Position.covers`): an entry published a moment ago is held
  back until a replica has it. A position can only be stored after what it
  covers reached a replica, so a reader never sees an entry a failover can
  take away; a stored position lost in a failover only delays readers until
  the next one passes it.
* **clients** — ``submit()``, ``cancel()``, ``apply_cluster()`` and the CLI
  return only after their own acknowledgement; :class:`NotReplicated` when no
  replica confirmed in time (the write is on the master and becomes
  acknowledged once a replica has it; sending it again is safe).

When the master has no replica attached at all — after a failover in a
deployment with a single replica, until the old master rejoins — there is
nothing to wait for. With ``ack_without_replica`` (the default) the master's
own write is the acknowledgement: the position says ``replicas: 0`` and the
process logs ``writes_acknowledged_without_replica`` once; a loss of such a
write (a second failure before a replica caught up) is a rollback that the
data generation check detects (:mod:`tasks.state.generation`). Without it, no
write is acknowledged until a replica attaches.

With ``replicas_required`` 0 (a plain Redis) nothing waits and readers are not
held back: what the master acknowledged is all there is.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis

from tasks.base.logging import get_logger
from tasks.state.partition import Partition
from tasks.state.scripts import ScriptCall
from tasks.state.streams import stream_id_key

log = get_logger(__name__)


class NotReplicated(redis.exceptions.ConnectionError):
    """No replica confirmed the writes in time. They are on the master and become acknowledged
    when a replica has them; doing the same call again is safe (every write is idempotent).

    A connection error for the service's outage handling: a worker requeues, a client retries.
    """


@dataclass(frozen=True, slots=True)
class Position:
    """How far a replica acknowledged the partition's writes.

    Attributes:
        seq: the mark it came from (later marks have higher ones).
        version: the cluster version at the mark.
        generation: the data generation id at the mark ("" before the first).
        streams: stream key → the id of its last entry at the mark.
        replicas: how many replicas confirmed it (0: a master that had none attached).
    """

    seq: int
    version: int
    generation: str
    streams: Mapping[str, str]
    replicas: int = 0

    @classmethod
    def parse(cls, raw: Any) -> Position | None:
        """The stored JSON as a position (None: none stored, or unreadable)."""
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            streams = {str(key): str(value) for key, value in dict(data["streams"]).items()}
            return cls(int(data["seq"]), int(data["version"]), str(data["generation"]), streams,
                       int(data.get("replicas", 0)))
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    def covers(self, stream: str, entry_id: str) -> bool:
        """Whether entry ``entry_id`` of ``stream`` is at or before this position."""
        bound = self.streams.get(stream)
        return bound is not None and stream_id_key(entry_id) <= stream_id_key(bound)


@dataclass(frozen=True, slots=True)
class _Marked:
    seq: int
    position_json: str
    connected: int
    confirmed: int  # WAIT's reply (0 when none was sent)


def _mark_reply(reply: Any) -> tuple[int, str] | None:
    return None if reply[0] == "current" else (int(reply[1]), str(reply[2]))


def _attached(info: Any) -> int:
    """Replicas attached to the master (``connected_slaves`` of ``INFO replication``, any sync state)."""
    return int(info.get("connected_slaves", 0)) if isinstance(info, dict) else 0


class Replication:
    """The partition's acknowledgements: marks, ``WAIT``, the stored position (thread-safe)."""

    def __init__(self, partition: Partition) -> None:
        self._partition = partition
        settings = partition.settings
        self.required = settings.replicas_required
        self._timeout_ms = max(1, int(settings.replica_ack_timeout_s * 1000))
        self._alone = settings.ack_without_replica
        self._lock = threading.Lock()
        #: Replicas the last mark found attached (WAIT asks for as many as can answer).
        self._expected = self.required
        self._degraded = False

    def position(self) -> Position | None:
        """The stored position (None: nothing acknowledged yet)."""
        return Position.parse(self._partition.client.get(self._partition.keys.acked))

    def acknowledge(self, *, only_if_new: bool = False) -> Position | None:
        """Wait until a replica holds every write made before this call, then store that position.

        Args:
            only_if_new: skip when nothing changed since the stored position
                (the drainer's catch-up; a client's own call always marks).

        Returns:
            The stored position, or None when nothing was to be acknowledged
            (``replicas_required`` 0, or nothing new).

        Raises:
            NotReplicated: replicas are attached but none confirmed within
                ``replica_ack_timeout_s`` (or none is attached and
                ``ack_without_replica`` is off).
            redis.RedisError: Redis failed.
        """
        if self.required == 0:
            return None
        for _ in range(2):  # a second time when a replica attached since the last mark
            asked = self._expected
            marked = self._mark_and_wait(only_if_new, asked)
            if marked is None:
                return None
            target = self._target(marked.connected)
            if marked.confirmed >= target:
                return self._store(marked, target)
            if asked >= target:
                raise NotReplicated(
                    f"no replica confirmed the writes within {self._timeout_ms} ms "
                    f"({marked.confirmed} of {target} with {marked.connected} attached); they are on "
                    "the master and are acknowledged once a replica has them: retrying is safe"
                )
            only_if_new = False
        raise NotReplicated("replicas attached and left while acknowledging; retrying is safe")

    def _target(self, connected: int) -> int:
        """Replicas to wait for when ``connected`` are attached (remembered for the next mark)."""
        target = min(self.required, connected) if self._alone else self.required
        with self._lock:
            self._expected = target
        return target

    def mark_call(self, *, only_if_new: bool = False) -> ScriptCall[tuple[int, str] | None]:
        """The mark (``mark.lua``): ``(seq, position JSON)``, or None when nothing is new."""
        k = self._partition.keys
        return ScriptCall(
            "mark", [k.acked, k.ack_marks, k.version, k.generation, *k.acknowledged_streams],
            ["1" if only_if_new else "0"], _mark_reply,
        )

    def advance_call(self, seq: int, position_json: str, replicas: int) -> ScriptCall[bool]:
        """Store a confirmed mark's position (``advance.lua``); true unless a later one is stored."""
        return ScriptCall("advance", [self._partition.keys.acked], [seq, position_json, replicas],
                          lambda reply: bool(int(reply)))

    def _mark_and_wait(self, only_if_new: bool, replicas: int) -> _Marked | None:
        batch = self._partition.batch()
        mark = batch.script(self.mark_call(only_if_new=only_if_new))
        attached = batch.command(_attached, "INFO", "replication")
        confirmed = batch.command(int, "WAIT", replicas, self._timeout_ms) if replicas else None
        batch.execute()
        if mark.value is None:
            return None
        seq, position_json = mark.value
        return _Marked(seq, position_json, attached.value, confirmed.value if confirmed else 0)

    def _store(self, marked: _Marked, target: int) -> Position | None:
        """Store the position (``advance.lua``), saying so when no replica is attached."""
        self._note_degraded(target == 0)
        confirmed = marked.confirmed if target else 0
        self._partition.call(self.advance_call(marked.seq, marked.position_json, confirmed))
        return Position.parse(json.dumps({**json.loads(marked.position_json), "replicas": confirmed}))

    def _note_degraded(self, degraded: bool) -> None:
        with self._lock:
            changed, self._degraded = degraded != self._degraded, degraded
        if changed and degraded:
            log.warning("writes_acknowledged_without_replica",
                        detail="the master has no replica attached: a write is acknowledged once the "
                        "master has it; its loss would be detected as a rollback (docs/service.md, Failover)")
        elif changed:
            log.warning("writes_acknowledged_by_replica_again")
