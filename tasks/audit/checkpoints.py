"""Audit checkpoints: the cluster folded at one version, stored once, where replay can start.

A checkpoint is what the fold of the log (:class:`~tasks.state.fold.ClusterFold`)
holds at version ``v`` — every worker row and every instance row with its
meta — plus the request bodies of the requests not finished then, read in one
atomic step (``checkpoint.lua``) that also appends ``sched.audit.checkpointed``
to the log. Its stream id is the checkpoint's *position*:

* every cluster change logged after the position has a version above ``v``;
* every decision logged after it was decided on version ``v`` or later — the
  same step raises the decision floor, and ``record_decision.lua`` refuses
  (as outdated, to be decided again) a decision read on an older version;
* every decision logged after it is for a request received after it or one of
  the checkpoint's pending requests (a finished request is never decided
  again; a reused id is received again).

So the log after the position, folded onto the checkpoint, replays every
decision in it, and the log before the position can be trimmed
(:mod:`tasks.audit.retention`). The live hashes and the log fold to identical
objects (the worker mirrors rely on it), so a checkpoint read from the live
state is the fold at ``v``.

Stored as canonical JSON under ``gpusched:checkpoint:<v>``, indexed in
``gpusched:checkpoints`` (version → position).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from scheduler_core import ModelInstance, Worker, canonical_json
from tasks.base.keys import Keys
from tasks.base.rows import parse_meta
from tasks.state.delays import parse_outbox_member
from tasks.state.fold import ClusterFold
from tasks.state.partition import Partition


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The cluster at ``version`` (rows as stored), and the requests still pending then.

    Attributes:
        version: the cluster version.
        position: id of its ``sched.audit.checkpointed`` event in the audit stream.
        workers: worker row JSON, by ascending id.
        instances: ``(key, row JSON, meta JSON)`` in cluster-entry order.
        requests: request id → the request as received (canonical JSON), for every
            request that was neither finished nor rejected at the position.
    """

    version: int
    position: str
    workers: tuple[str, ...] = ()
    instances: tuple[tuple[str, str, str], ...] = ()
    requests: Mapping[str, str] = field(default_factory=dict)

    def document(self) -> str:
        """The stored form (canonical JSON)."""
        return canonical_json({
            "version": self.version,
            "position": self.position,
            "workers": list(self.workers),
            "instances": [list(item) for item in self.instances],
            "requests": dict(self.requests),
        })

    @classmethod
    def from_document(cls, text: str) -> Checkpoint:
        """Inverse of :meth:`document`.

        Raises:
            ValueError / KeyError: not a checkpoint document.
        """
        data = json.loads(text)
        instances = tuple((str(k), str(row), str(meta)) for k, row, meta in data["instances"])
        return cls(int(data["version"]), str(data["position"]), tuple(data["workers"]), instances,
                   dict(data["requests"]))

    def fold(self) -> ClusterFold:
        """A fold at :attr:`version` holding the checkpoint's cluster."""
        fold = ClusterFold()
        fold.load(
            self.version,
            (Worker.model_validate_json(row) for row in self.workers),
            (
                (key, ModelInstance.model_validate_json(row), parse_meta(meta))
                for key, row, meta in self.instances
            ),
        )
        return fold


def take_checkpoint(partition: Partition) -> Checkpoint:
    """Checkpoint the cluster now and store it (see ``checkpoint.lua``)."""
    k = partition.keys
    reply = partition.run(
        "checkpoint",
        [k.version, k.workers, k.instances, k.instance_meta, k.events, k.outbox, k.parked, k.decision_floor],
        partition.meta().argv(),
    )
    version, position = int(reply[0]), str(reply[1])
    workers = _pairs(reply[2])
    metas = _pairs(reply[4])
    instances = [(key, row, metas[key]) for key, row in _pairs(reply[3]).items() if key in metas]
    instances.sort(key=lambda item: parse_meta(item[2]).order)
    pending = {parse_outbox_member(str(member))[0] for member in reply[5]} | {str(rid) for rid in reply[6]}
    checkpoint = Checkpoint(
        version, position, tuple(workers[wid] for wid in sorted(workers, key=int)), tuple(instances),
        _request_bodies(partition.client, k, sorted(pending)),
    )
    pipe = partition.client.pipeline(transaction=True)
    pipe.set(k.checkpoint(version), checkpoint.document())
    pipe.hset(k.checkpoints, str(version), position)
    pipe.execute()
    return checkpoint


def _pairs(flat: Sequence[Any]) -> dict[str, str]:
    return {str(flat[i]): str(flat[i + 1]) for i in range(0, len(flat), 2)}


def _request_bodies(client: redis.Redis, keys: Keys, request_ids: Sequence[str]) -> dict[str, str]:
    """The stored request of each id, canonical as its ``sched.request.received`` event embeds it."""
    pipe = client.pipeline(transaction=False)
    for request_id in request_ids:
        pipe.hget(keys.request(request_id), "request")
    bodies: dict[str, str] = {}
    for request_id, raw in zip(request_ids, pipe.execute(), strict=True):
        if raw:
            bodies[request_id] = canonical_json(json.loads(raw))
    return bodies


def checkpoint_positions(client: redis.Redis, keys: Keys) -> dict[int, str]:
    """Stored checkpoints: version → position, by ascending version."""
    raw = dict(client.hgetall(keys.checkpoints))
    return {int(v): str(raw[v]) for v in sorted(raw, key=int)}


def load_checkpoint(client: redis.Redis, keys: Keys, version: int) -> Checkpoint:
    """The stored checkpoint of ``version``.

    Raises:
        LookupError: none is stored.
    """
    text = client.get(keys.checkpoint(version))
    if text is None:
        raise LookupError(f"checkpoint {version} is not stored")
    return Checkpoint.from_document(str(text))
