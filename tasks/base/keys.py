"""Every Redis key, stream and queue name of the service, in one place.

Single cluster (the default, Contract 3)::

    gpusched.requests            Celery queue: new scheduling requests
    gpusched:results             stream: one entry per published result
    gpusched:events              stream: the audit log (trimmed behind the oldest checkpoint kept)
    gpusched:cluster:version     ...

With a cluster id ``c1`` every key carries the hash tag ``{c1}``
(``gpusched:{c1}:results``) so one partition's keys live in one Redis Cluster
slot and multi-key Lua scripts stay legal; queues become ``gpusched.{c1}.requests``.
See ``docs/service.md`` for what each key holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Keys:
    """Key names for one cluster partition (``cluster=None``: the default names)."""

    cluster: str | None = None
    prefix: str = field(init=False)
    queue_prefix: str = field(init=False)

    def __post_init__(self) -> None:
        tag = f":{{{self.cluster}}}" if self.cluster else ""
        object.__setattr__(self, "prefix", f"gpusched{tag}")
        queue_tag = f".{{{self.cluster}}}" if self.cluster else ""
        object.__setattr__(self, "queue_prefix", f"gpusched{queue_tag}")

    # ----------------------------------------------------------------- queues
    @property
    def requests_queue(self) -> str:
        """Intake queue (Contract 3): ``gpusched.decide`` messages."""
        return f"{self.queue_prefix}.requests"

    @property
    def commits_queue(self) -> str:
        """``gpusched.resume`` (a decision's leftover step); consumed before new requests."""
        return f"{self.queue_prefix}.commits"

    @property
    def cluster_queue(self) -> str:
        """``gpusched.cluster_event`` and ``gpusched.drain_delayed``; consumed first."""
        return f"{self.queue_prefix}.cluster"

    @property
    def queues(self) -> tuple[str, ...]:
        """All queues a worker consumes, in the order it drains them."""
        return (self.cluster_queue, self.commits_queue, self.requests_queue)

    # ------------------------------------------------------ kombu and Celery
    @property
    def unacked(self) -> str:
        """kombu's hash of the messages workers hold (``unacked`` unpartitioned; per partition
        ``gpusched:{c1}:kombu:unacked``, so one partition's ACL users cannot reach another's)."""
        return f"{self.prefix}:kombu:unacked" if self.cluster else "unacked"

    @property
    def unacked_index(self) -> str:
        """kombu's sorted set of held messages by delivery time (partitioned like :attr:`unacked`)."""
        return f"{self.prefix}:kombu:unacked_index" if self.cluster else "unacked_index"

    @property
    def unacked_mutex(self) -> str:
        """kombu's lock around restoring held messages (partitioned like :attr:`unacked`)."""
        return f"{self.prefix}:kombu:unacked_mutex" if self.cluster else "unacked_mutex"

    @property
    def event_exchange(self) -> str | None:
        """Celery's event exchange for a partition (its pub/sub channels carry the partition's
        tag); None: Celery's default (``celeryev``)."""
        return f"{self.queue_prefix}.events" if self.cluster else None

    # ---------------------------------------------------------------- streams
    @property
    def results(self) -> str:
        """Stream of published results (fields ``request_id``, ``result``, ...)."""
        return f"{self.prefix}:results"

    @property
    def events(self) -> str:
        """The audit stream; trimmed only behind the oldest checkpoint kept (:mod:`tasks.audit.retention`)."""
        return f"{self.prefix}:events"

    @property
    def deadletter(self) -> str:
        """Stream of messages the redelivery guard gave up on, with the reason."""
        return f"{self.prefix}:deadletter"

    @property
    def changes(self) -> str:
        """Compact stream of cluster mutations (a cache feed for worker mirrors; trimmed)."""
        return f"{self.prefix}:cluster:changes"

    # -------------------------------------------------------- data generation
    @property
    def generation(self) -> str:
        """String: the data generation (JSON: id, created, ...; see :mod:`tasks.state.generation`)."""
        return f"{self.prefix}:generation"

    @property
    def data_lost(self) -> str:
        """String: the loss marker (JSON), present from a detected data loss until a recovery."""
        return f"{self.prefix}:data_lost"

    # ------------------------------------------------------ acknowledged writes
    @property
    def acked(self) -> str:
        """String: the position a replica acknowledged (JSON: mark seq, cluster version,
        generation, the last entry id of each stream; see :mod:`tasks.state.replication`)."""
        return f"{self.prefix}:acked"

    @property
    def ack_marks(self) -> str:
        """Counter of the marks written for WAIT (one per acknowledgement)."""
        return f"{self.prefix}:acked:marks"

    @property
    def acknowledged_streams(self) -> tuple[str, ...]:
        """The streams whose readers see only acknowledged entries."""
        return (self.results, self.events, self.deadletter)

    # ---------------------------------------------------------- cluster state
    @property
    def version(self) -> str:
        """Cluster version counter, incremented by every mutation."""
        return f"{self.prefix}:cluster:version"

    @property
    def epoch(self) -> str:
        """Wake epoch: bumped by every cluster change that could unblock a parked request."""
        return f"{self.prefix}:cluster:epoch"

    @property
    def followups(self) -> str:
        """Sorted set follow-up id → due time (ms): cluster changes' pending follow-up work."""
        return f"{self.prefix}:followups"

    @property
    def followup_jobs(self) -> str:
        """Hash follow-up id → job JSON (reschedule, expire, wake), see ``lib.lua``."""
        return f"{self.prefix}:followup_jobs"

    @property
    def workers(self) -> str:
        """Hash worker id → worker row JSON."""
        return f"{self.prefix}:cluster:workers"

    @property
    def worker_gpus(self) -> str:
        """Hash worker id → JSON array of the GPU keys of its capacity entries."""
        return f"{self.prefix}:cluster:worker_gpus"

    @property
    def vanished(self) -> str:
        """Hash worker id → when (ms) it left the cluster (removed, or missing from a snapshot)."""
        return f"{self.prefix}:cluster:vanished"

    @property
    def health(self) -> str:
        """Hash worker id → health JSON (``down_since_ms``, ``up_since_ms``)."""
        return f"{self.prefix}:cluster:health"

    @property
    def instances(self) -> str:
        """Hash instance key → ModelInstance row JSON."""
        return f"{self.prefix}:cluster:instances"

    @property
    def instance_meta(self) -> str:
        """Hash instance key → meta JSON (source, order, request id, pinned, workers)."""
        return f"{self.prefix}:cluster:instance_meta"

    @property
    def capacity(self) -> str:
        """Hash GPU key → bookable bytes (total − system_reserved.vram)."""
        return f"{self.prefix}:ledger:capacity"

    @property
    def booked(self) -> str:
        """Hash GPU key → bytes claimed by the instances on it."""
        return f"{self.prefix}:ledger:booked"

    @property
    def claims(self) -> str:
        """Hash instance key → ``[["<gpu key>", "<bytes>"], ...]`` claims it holds (JSON)."""
        return f"{self.prefix}:ledger:claims"

    @property
    def reschedule_suspended(self) -> str:
        """String set while rescheduling is suspended (too many workers down): the notice JSON."""
        return f"{self.prefix}:reschedule:suspended"

    def snapshot(self, digest: str) -> str:
        """Content-addressed cluster snapshot stored once by ``cluster apply``."""
        return f"{self.prefix}:snapshot:{digest}"

    # ------------------------------------------------------------------ audit
    def checkpoint(self, version: int) -> str:
        """The cluster folded at ``version`` and the requests still pending then (JSON, stored once)."""
        return f"{self.prefix}:checkpoint:{version}"

    @property
    def checkpoints(self) -> str:
        """Hash version → audit-stream id up to which the checkpoint of that version folds the log."""
        return f"{self.prefix}:checkpoints"

    @property
    def decision_floor(self) -> str:
        """The newest checkpoint's version: no decision on an older version is recorded any more."""
        return f"{self.prefix}:audit:floor"

    @property
    def audit_state(self) -> str:
        """Hash: the retention's scan position in the audit stream, events scanned since the
        last checkpoint, and where the log was trimmed (``trimmed_at``, ``trimmed_version``)."""
        return f"{self.prefix}:audit:state"

    @property
    def snapshot_refs(self) -> str:
        """Sorted set snapshot digest → ms part of the last audit-stream id that references it."""
        return f"{self.prefix}:audit:snapshot_refs"

    @property
    def maintenance_lock(self) -> str:
        """Lease of the retention pass (one worker node at a time)."""
        return f"{self.prefix}:lock:maintenance"

    # --------------------------------------------------------------- requests
    def request(self, request_id: str) -> str:
        """Hash holding one request's record (state, seq, attempt, request, result)."""
        return f"{self.prefix}:req:{request_id}"

    @property
    def parked(self) -> str:
        """Hash request id → parked entry JSON (reasons, selectors, seq)."""
        return f"{self.prefix}:parked"

    @property
    def outbox(self) -> str:
        """Sorted set ``request_id|seq|attempt`` → due time (ms): decisions to enqueue."""
        return f"{self.prefix}:outbox"

    @property
    def timers(self) -> str:
        """Sorted set ``grace:<worker>``, ``stable:<worker>``, ``retry:<request>|<seq>`` → due (ms)."""
        return f"{self.prefix}:timers"

    @property
    def decide_lock(self) -> str:
        """Lease serialising decide+reserve within the partition (token; see :mod:`tasks.decision.lease`)."""
        return f"{self.prefix}:lock:decide"

    @property
    def decide_lock_wake(self) -> str:
        """List a released decide lease pushes one token to, waking a waiting decider."""
        return f"{self.prefix}:lock:decide:wake"

    @property
    def decider(self) -> str:
        """The active decider's presence with ``decider_standby`` on (its node id, with a TTL;
        see :mod:`tasks.runtime.standby`)."""
        return f"{self.prefix}:lock:decider"

    @property
    def nodes(self) -> str:
        """Hash worker node name → JSON {pid, ready_ms, seen_ms} (drainer heartbeat)."""
        return f"{self.prefix}:nodes"

    def delivery(self, task_id: str) -> str:
        """Set of the starts (one member each) of one task message's deliveries that never completed."""
        return f"{self.prefix}:delivery:{task_id}"

    def task_errors(self, task_id: str) -> str:
        """Counter of unexpected exceptions raised by one task message."""
        return f"{self.prefix}:errors:{task_id}"
