"""Control-plane client: submit requests, wait for results, change the cluster.

    from tasks.client import submit
    result = submit(request_dict, wait=True, timeout=30)   # Contract 1 result dict

A request is validated here, at the edge: an invalid one gets its terminal
``rejected`` result (naming the field) at once, without a worker. A valid one
is recorded (idempotent on ``request_id``: the same id submitted twice yields
one decision) together with an outbox entry, then its ``gpusched.decide``
message is sent to ``gpusched.requests`` (:mod:`tasks.flows.submit`); if
this process dies in between, or sending fails (broker unreachable), a
worker's drainer sends it after ``outbox_lease_s``: once a request is
accepted it is driven to its result.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any, TypeVar

import redis
from pydantic import ValidationError

from scheduler_core import Worker
from tasks.base.lifecycle import RecordState
from tasks.base.settings import Settings, get_settings
from tasks.flows.cancels import cancel_request
from tasks.flows.cluster_changes import apply_snapshot, handle_cluster_event
from tasks.flows.recovery import export_state
from tasks.flows.recovery import recover as recover_partition
from tasks.flows.snapshot_diff import diff_snapshot
from tasks.flows.submit import Submission, submit_request
from tasks.flows.submit_batch import submit_requests
from tasks.intake.cluster_events import SnapshotEvent, check_against_worker, event_worker_id, parse_event
from tasks.intake.limits import IntakeLimits, InvalidField
from tasks.intake.requests import normalize
from tasks.intake.snapshots import SnapshotRows, check_snapshot_size, parse_snapshot
from tasks.runtime.celery_app import TaskSender, client_app
from tasks.runtime.middleware.node_heartbeat import HEARTBEAT_DRAIN_PASSES
from tasks.state.cluster_store import removal_refusal
from tasks.state.context import Runtime, build_runtime, redis_client
from tasks.state.streams import read_new

#: Longest block of one blocking read in :meth:`ServiceClient.wait` (its socket timeout follows).
WAIT_BLOCK_MS = 1000
#: How long :meth:`ServiceClient.wait` lets the cluster go without a live worker before it gives up
#: (a worker that is starting registers itself when ready).
NO_WORKER_GRACE_S = 5.0
#: A node whose heartbeat is older than this many heartbeat periods counts as dead.
STALE_HEARTBEATS = 3
#: Pause before reading again while results entries wait for a replica (s): one acknowledgement
#: (mark, WAIT, store) takes a few round trips on a local network.
ACK_POLL_S = 0.02

T = TypeVar("T")
#: Stream entries: ``(id, fields)``.
Entries = list[tuple[str, dict[str, str]]]


class WaitTimeout(TimeoutError):
    """No result arrived within the timeout (the request is still accepted)."""


class NoLiveWorker(WaitTimeout):
    """Waiting is pointless: no worker node has a recent heartbeat (the request is still accepted)."""


class ServiceClient:
    """Talks to one gpusched deployment (``settings.redis_url``, ``settings.cluster``)."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or get_settings()
        self._app = client_app(self.settings)
        self._sender = TaskSender(self._app)
        self.rt: Runtime = build_runtime(self.settings, self._sender.decide, self._sender.resume,
                                         dispatch_batch=self._sender.decide_batch)
        self._blocking = redis_client(self.settings, blocking=True, max_block_ms=WAIT_BLOCK_MS)

    # ------------------------------------------------------------------ submit
    def submit(
        self, request: Any, *, wait: bool = False, timeout: float = 30.0, terminal: bool = False
    ) -> Submission | dict[str, Any]:
        """Submit one request (Contract 1 dict).

        Args:
            request: the request; ``workers``/``model_instances`` are ignored
                (the service holds the cluster).
            wait: block until the request's first result (or, with ``terminal``,
                its terminal result) is on the results stream and return it.
            timeout: seconds to wait.

        Returns:
            The result dict when waiting, else a :class:`Submission`. A ``conflict`` (the id
            holds a different request) is returned as its :class:`Submission` even when
            waiting: the id's result belongs to the other request, so there is none to wait for.

        Raises:
            WaitTimeout: waiting timed out (the request is accepted and still driven).
            tasks.state.generation.DataLost: Redis lost the service's data (wiped or
                rolled back) and no recovery ran: nothing is accepted or decided
                (docs/service.md, *Recovery*).
            redis.RedisError: Redis failed while the request was being recorded
                (see :func:`tasks.flows.submit.submit_request`: resubmitting is safe). Once it is
                recorded, a failure to send the decision does not raise: the
                outbox watchdog sends it.
        """
        start = self._last_result_id() if wait else "0-0"
        submission = self._submit(request)
        if not wait:
            return submission
        if submission.result is not None:
            return submission.result
        if submission.status == "conflict":  # never the other request's result (docs/service.md)
            return submission
        return self.wait(submission.request_id, timeout=timeout, start_id=start, terminal=terminal)

    def submit_many(self, requests: Sequence[Any]) -> list[Submission]:
        """Submit many requests (Contract 1 dicts) at once; one :class:`Submission` each, in order.

        Each request is taken in exactly as :meth:`submit` takes it — its own id,
        validation (an invalid one is ``rejected`` alone, with its result), record,
        ``duplicate`` and ``conflict`` answers, result entry, cancel and replay —
        but the records are written in one round trip and the accepted requests
        are decided as ``gpusched.decide_batch`` messages of up to
        ``decide_batch_size`` requests (docs/service.md, *Batches*). Wait for the
        results with :meth:`wait` per request. With ``submit_via = "queue"`` each
        request goes as its own raw message (that user cannot write records).

        Raises:
            tasks.state.generation.DataLost, redis.RedisError: as :meth:`submit`
                (submitting the same requests again is safe).
        """
        self.rt.generation.ensure_ok(create=False)
        if self.settings.submit_via == "queue":
            return [self._enqueue(request) for request in requests]
        return self._acknowledged(submit_requests(self.rt, requests))

    def _submit(self, request: Any) -> Submission:
        self.rt.generation.ensure_ok(create=False)
        if self.settings.submit_via == "queue":
            return self._enqueue(request)
        return self._acknowledged(submit_request(self.rt, request))

    def _acknowledged(self, value: T) -> T:
        """``value``, once a replica holds every write made so far (replicas required).

        Raises:
            tasks.state.replication.NotReplicated: no replica confirmed in time (the
                writes are on the master; doing the same call again is safe).
        """
        self.rt.replication.acknowledge()
        return value

    def _enqueue(self, request: Any) -> Submission:
        """``submit_via = "queue"`` (the submitter ACL user): validate here, let a worker record it.

        An invalid request is answered here (its rejection is not published: this
        user cannot write results), and so is an id already holding a different
        request (``conflict``, read from its record); a valid one is pushed onto ``gpusched.requests``
        as a raw request (``queued``), and a worker records, decides and publishes it.
        """
        normalized = normalize(request, IntakeLimits.of(self.settings))
        if normalized.rejection is not None:
            return Submission(normalized.request_id, "rejected",
                              result=json.loads(normalized.rejection.model_dump_json()))
        stored = self.rt.records.record(normalized.request_id)  # read-only for this user
        if stored.get("digest") and stored["digest"] != normalized.digest:
            # the worker would answer it in its log only: say it here, and send nothing
            return Submission(normalized.request_id, "conflict", state=stored.get("state", ""),
                              digest=normalized.digest, stored_digest=stored["digest"])
        self._sender.submit(request)
        return Submission(normalized.request_id, RecordState.QUEUED)

    # -------------------------------------------------------------------- wait
    def last_result_id(self) -> str:
        """The results stream's last entry id (a :meth:`wait` from it sees every later result)."""
        return self._last_result_id()

    def _last_result_id(self) -> str:
        if self.rt.replication.required:  # never past an entry a failover could take away
            position = self.rt.replication.position()
            return position.streams.get(self.rt.keys.results, "0-0") if position else "0-0"
        last = self.rt.client.xrevrange(self.rt.keys.results, count=1)
        return str(last[0][0]) if last else "0-0"

    def readable(self, entry_id: str | None) -> bool:
        """Whether the results entry ``entry_id`` may be acted on: a replica acknowledged it, so no
        failover can take it away (always, without replicas required; never for None)."""
        if not self.rt.replication.required:
            return True
        position = self.rt.replication.position()
        return bool(entry_id) and position is not None and position.covers(self.rt.keys.results,
                                                                           str(entry_id))

    def stored_result(self, request_id: str, *, terminal: bool = False) -> dict[str, Any] | None:
        """The request's published result from its record, if one was published.

        The terminal result once the request is done; else (unless
        ``terminal``) the ``unschedulable`` notice it was announced with —
        never a decision that is recorded but not published.
        """
        record = self.rt.records.record(request_id)
        finished = record.get("state") == RecordState.DONE
        if finished and record.get("result") and self.readable(record.get("result_id")):
            text = record["result"]
        elif not terminal and record.get("notice") and self.readable(record.get("notice_id")):
            text = record["notice"]
        else:
            return None
        value: dict[str, Any] = json.loads(text)
        return value

    def live_workers(self) -> list[str]:
        """Worker nodes with a recent heartbeat in ``gpusched:nodes`` (see
        :mod:`tasks.runtime.middleware.node_heartbeat`): seen within
        :data:`STALE_HEARTBEATS` heartbeat periods."""
        period_ms = self.settings.drain_interval_s * HEARTBEAT_DRAIN_PASSES * 1000
        oldest = self.rt.partition.now_ms() - STALE_HEARTBEATS * period_ms
        alive: list[str] = []
        for node, raw in sorted(self.rt.client.hgetall(self.rt.keys.nodes).items()):
            try:
                seen = float(json.loads(raw).get("seen_ms", 0))
            except (ValueError, TypeError, AttributeError):
                continue
            if seen >= oldest:
                alive.append(str(node))
        return alive

    def _check_workers(self, request_id: str, since: float | None) -> float | None:
        """When the cluster has had no live worker since ``since``; raise past the grace."""
        if self.live_workers():
            return None
        now = time.monotonic()
        if since is not None and now - since >= NO_WORKER_GRACE_S:
            period = self.settings.drain_interval_s * HEARTBEAT_DRAIN_PASSES
            raise NoLiveWorker(
                f"no gpusched worker is alive (no heartbeat in {self.rt.keys.nodes} within the last "
                f"{STALE_HEARTBEATS * period:g} s); {request_id} is accepted and will be decided "
                "when a worker runs"
            )
        return since if since is not None else now

    def wait(
        self, request_id: str, *, timeout: float = 30.0, start_id: str = "0-0", terminal: bool = False
    ) -> dict[str, Any]:
        """Block until a result for ``request_id`` is on the results stream.

        Raises:
            NoLiveWorker: no worker node had a heartbeat for :data:`NO_WORKER_GRACE_S`
                while waiting (a subclass of :class:`WaitTimeout`).
            WaitTimeout: nothing arrived within ``timeout`` seconds.
        """
        stored = self.stored_result(request_id, terminal=terminal)
        if stored is not None:
            return stored
        deadline = time.monotonic() + timeout
        cursor = start_id
        without_worker: float | None = None
        while (remaining := deadline - time.monotonic()) > 0:
            without_worker = self._check_workers(request_id, without_worker)
            block = max(1, min(int(remaining * 1000), WAIT_BLOCK_MS))
            try:
                entries = read_new(self._blocking, self.rt.keys.results, cursor, count=500,
                                   block_ms=block)
            except redis.TimeoutError:  # no reply within the block + margin: reconnect, go on
                continue
            shown = self.acknowledged_entries(entries)
            for entry_id, fields in shown:
                cursor = entry_id
                if fields.get("request_id") == request_id and (
                    not terminal or fields.get("terminal") == "1"
                ):
                    value: dict[str, Any] = json.loads(fields["result"])
                    return value
            if len(shown) < len(entries):  # held back until a replica has them
                time.sleep(ACK_POLL_S)
        raise WaitTimeout(f"no result for {request_id} within {timeout:g} s")

    def acknowledged_entries(self, entries: Entries) -> Entries:
        """The leading ``entries`` a replica acknowledged (all of them without replicas required)."""
        if not self.rt.replication.required or not entries:
            return entries
        position = self.rt.replication.position()
        stream = self.rt.keys.results
        shown = 0
        while shown < len(entries) and position is not None and position.covers(stream, entries[shown][0]):
            shown += 1
        return entries[:shown]

    # ------------------------------------------------------------------ cancel
    def cancel(self, request_id: str) -> dict[str, Any]:
        """Withdraw a request, exactly once, whatever step it is at (in this process).

        A request not placed yet (queued, parked, retrying, or with a decision
        in flight) gets its one terminal result, status ``cancelled``, and never
        books; a booking its decision made meanwhile is released. A request
        whose placement was published has its booking released (a ``released``
        notice on the results stream). A booking moved to ``<id>~<n>`` is
        followed. Idempotent (see :func:`tasks.flows.cancels.cancel_request`).

        Returns:
            ``{"request_id", "status", ...}``; ``status`` is ``cancelled``,
            ``released``, ``already_cancelled``, ``finished`` (nothing held) or
            ``unknown``.
        """
        return self._acknowledged(cancel_request(self.rt, request_id, by="client"))

    # ----------------------------------------------------------------- cluster
    def apply_cluster(
        self, document: dict[str, Any], *, recover: bool = False, allow_removal: bool = False,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Replace the cluster with a snapshot (in this process) and wake parked requests.

        Args:
            allow_removal: confirm a snapshot that removes more than
                ``max_removed_fraction`` of the workers (refused otherwise,
                :class:`tasks.state.cluster_store.RemovalRefused`).
            dry_run: change nothing; return what applying it would change
                (:func:`tasks.flows.snapshot_diff.diff_snapshot`).
            recover: rebuild a partition whose data Redis lost: the document may
                carry gpusched's ``bookings`` (what :meth:`export_cluster`
                writes), which are re-created; a new data generation resumes the
                workers (:func:`tasks.flows.recovery.recover`).

        Raises:
            pydantic.ValidationError / ValueError: invalid rows, or larger than
                ``max_snapshot_bytes`` (nothing changes).
            tasks.state.generation.DataLost: Redis lost the service's data and
                ``recover`` is not set.
        """
        check_snapshot_size(document, self.settings.max_snapshot_bytes)
        if dry_run:
            return diff_snapshot(self.rt, parse_snapshot(document), allow_removal=allow_removal)
        if recover:
            return self._acknowledged(recover_partition(self.rt, document))
        self.rt.generation.ensure_ok(create=False)
        return self._acknowledged(apply_snapshot(self.rt, document, allow_removal=allow_removal))

    def export_cluster(self) -> dict[str, Any]:
        """The cluster as a recovery document: workers, the control plane's instances, gpusched's bookings.

        Keep one (``gpusched cluster export``): after Redis lost its data,
        ``apply_cluster(document, recover=True)`` re-creates the bookings too.
        """
        return self._acknowledged(export_state(self.rt))  # a backup holds only replicated state

    def check_cluster_event(self, event: Any) -> InvalidField | None:
        """What is wrong with ``event`` before it is queued, None when nothing is.

        The door the worker applies (:func:`tasks.intake.cluster_events.parse_event`:
        size, nesting, Unicode, shape, key alphabets; a snapshot's rows), and what only
        the current cluster tells: the worker an event changes must exist (but for
        ``worker_added``), a ``gpu_memory_changed`` must name its GPUs, a snapshot must
        not remove more than ``max_removed_fraction`` of the stored workers unless it
        carries ``allow_removal`` (field ``workers``, the worker's own message:
        :func:`tasks.state.cluster_store.removal_refusal`).

        Raises:
            tasks.state.generation.DataLost: Redis lost the service's data (no recovery
                ran): the cluster it would check against is not the service's.
        """
        try:
            parsed = parse_event(event, IntakeLimits.of(self.settings))
            snapshot = parsed if isinstance(parsed, SnapshotEvent) else None
            rows = parse_snapshot(snapshot.model_dump(mode="json")) if snapshot else None
            self.rt.generation.ensure_ok(create=False)
            if snapshot is not None and rows is not None:
                self._check_removal(rows, allow_removal=snapshot.allow_removal)
            named = event_worker_id(parsed)
            stored = self.rt.cluster.worker_row(named[1]) if named else None
            check_against_worker(parsed, Worker.model_validate_json(stored) if stored else None)
        except InvalidField as error:
            return error
        except ValidationError as error:  # a snapshot row of the wrong type
            first = error.errors(include_url=False)[0]
            return InvalidField(".".join(str(part) for part in first["loc"]), str(first["msg"]))
        return None

    def _check_removal(self, rows: SnapshotRows, *, allow_removal: bool) -> None:
        """Raise the :class:`~tasks.state.cluster_store.RemovalRefused` the worker would meet."""
        new_ids = [str(worker.id) for worker in rows.workers]
        refusal = removal_refusal(self.rt.cluster.worker_ids(), new_ids,
                                  self.settings.max_removed_fraction, allow_removal=allow_removal)
        if refusal is not None:
            raise refusal

    def cluster_event(self, event: Any, *, queue: bool = True) -> dict[str, Any]:
        """Validate a cluster event, then send it to ``gpusched.cluster_event`` (or apply it here).

        Returns:
            The summary: ``queued`` with the message id; the applied event's summary
            with ``queue=False``; or ``rejected`` with ``field`` and ``error`` when
            :meth:`check_cluster_event` refuses it (nothing is queued or applied).

        Raises:
            tasks.state.generation.DataLost: Redis lost the service's data (no recovery ran).
            redis.RedisError, kombu.exceptions.OperationalError: Redis or the broker is
                unreachable (an outage, :data:`tasks.state.outages.TRANSIENT_ERRORS`; the
                broker's error when Celery's producer gave up on a queued send, e.g. while a
                Sentinel failover moves the master): send the event again, applying one
                twice changes nothing.
        """
        self.rt.generation.ensure_ok(create=False)
        problem = self.check_cluster_event(event)
        kind = event.get("kind") if isinstance(event, dict) else None
        if problem is not None:
            return {"kind": kind, "status": "rejected", "field": problem.field, "error": problem.message}
        if not queue:
            return self._acknowledged(handle_cluster_event(self.rt, event))
        task_id = self._sender.cluster_event(event)
        return self._acknowledged({"kind": kind, "status": "queued", "task_id": task_id})

    def close(self) -> None:
        """Close the Redis and broker connections."""
        self.rt.client.close()
        self._blocking.close()
        self._app.close()


_DEFAULT: ServiceClient | None = None


def default_client() -> ServiceClient:
    """A client for the process settings (created on first use)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = ServiceClient()
    return _DEFAULT


def submit(
    request: Any, *, wait: bool = False, timeout: float = 30.0, terminal: bool = False
) -> Submission | dict[str, Any]:
    """Submit ``request`` to the deployment named by ``GPUSCHED_*`` settings.

    Same arguments and errors as :meth:`ServiceClient.submit`.

    Returns:
        The result dict when ``wait`` is true (a :class:`Submission` with status
        ``conflict`` for a conflicting id), else a :class:`Submission`.
    """
    return default_client().submit(request, wait=wait, timeout=timeout, terminal=terminal)


__all__ = ["NoLiveWorker", "ServiceClient", "Submission", "WaitTimeout", "default_client", "submit"]
