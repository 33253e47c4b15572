"""Many decisions in one message: ``gpusched.decide_batch``, under one lease hold, one commit.

What the batch task runs (:func:`decide_batch`) for requests already recorded
(``[request_id, seq, attempt]`` items, as ``gpusched.decide`` takes them), in
rounds of two round trips to Redis, after one read of the changes:

0. bring the mirror up to date before taking the lease (after a ``cluster
   apply``, loading the new snapshot is the slow part of the first decision:
   done while another process holds the lease, it is not added to the
   lease's hold);
1. take the decide lease, claim every item's attempt (``begin.lua``) and read
   the cluster's changes, in one pipeline;
2. sync the mirror once and decide the items in order, in process: each
   booking decided is applied to the mirror at the next version before it is
   committed (:meth:`~tasks.state.mirror.ClusterMirror.book_ahead`), so the next
   request sees the cluster exactly as it would after a commit, and each
   decision is recorded with the version it read;
3. commit every decision in one pipeline — each item's record and booking,
   the lease release, then each item's publish or park
   (:class:`~tasks.decision.commit.Commit`, the same calls as a decision
   committed alone).

Guarantees: each request keeps everything a request decided alone has — its
own record, attempt, decision event, booking, result entry, cancel and
replay — and gets the same bytes: a decision that read a booking ahead of its
commit is recorded only if the cluster is still at the version it read
(``record_decision.lua``), i.e. the batch's earlier bookings, and nothing
else, made it; otherwise nothing of it is written and it is decided again in
the next round on a fresh snapshot, as an outdated decision alone is (the
booking that made the version is the batch's last one before the decision,
itself recorded only under the same rule: by induction, every earlier booking
landed at the version foreseen). Rounds
go on while any decision stands, then the watchdog drives what is left.
Redelivered (its worker died), a batch claims its items again: an attempt
already decided continues with its recorded step, so each request is decided
once.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from scheduler_core import deciding
from tasks.base.logging import get_logger
from tasks.base.step import RESERVE, Step
from tasks.base.task_names import DECIDE_BATCH
from tasks.decision.commit import Commit, Progress, decide_lease, resumed
from tasks.decision.decide import OUTDATED_ATTEMPTS, decide_on
from tasks.decision.lease import DecideLease
from tasks.state.context import Runtime
from tasks.state.mirror import Changes
from tasks.state.records import Begun, RecordOutcome
from tasks.state.scripts import ScriptCall

log = get_logger(__name__)

#: One batch item: the request id, its decision seq and attempt.
Item = tuple[str, int, int]

#: Where a batch's wall time goes: bringing the mirror up to date before the lease, taking the
#: lease and claiming the items (one round trip, and any wait for a busy lease), deciding them
#: (the core and the mirror's bookings ahead), and the commit (one pipeline) with the mirror
#: settled after it.
STEPS = ("sync", "claim", "decide", "commit")


@dataclass(slots=True)
class BatchProgress:
    """What one batch message did.

    Attributes:
        outcomes: per request finished by this message, its publish or park outcome.
        leftover: steps another delivery recorded first (sent on as ``gpusched.resume``).
        created_ms: per decided request, when it was accepted (the latency metric).
        decided: decisions the core ran for this message.
        rounds: decision rounds (more than one when the cluster changed during one).
        step_s: wall seconds spent in each step, summed over the rounds (:data:`STEPS`).
    """

    outcomes: dict[str, str] = field(default_factory=dict)
    leftover: list[Step] = field(default_factory=list)
    created_ms: dict[str, int] = field(default_factory=dict)
    decided: int = 0
    rounds: int = 0
    step_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STEPS, 0.0))

    def summary(self) -> dict[str, int]:
        """Counts per outcome (the task's return value)."""
        counts = Counter(self.outcomes.values())
        return {**dict(sorted(counts.items())), "resumed": len(self.leftover), "decided": self.decided,
                "rounds": self.rounds}

    def timings(self) -> dict[str, float]:
        """Wall milliseconds per step, as ``<step>_ms`` (the ``batch_finished`` log line's timings)."""
        return {f"{step}_ms": round(seconds * 1000, 3) for step, seconds in self.step_s.items()}


@dataclass(slots=True)
class _Planned:
    """One item's commit in a round, and the version its booking must produce (booked ahead)."""

    item: Item
    commit: Commit
    record: ScriptCall[RecordOutcome] | None
    foreseen: int | None = None


def decide_batch(rt: Runtime, items: Sequence[Item], task_id: str) -> BatchProgress:
    """Decide, book and publish (or park) every item, in rounds (see the module docstring).

    Args:
        items: ``(request_id, seq, attempt)``, each request once (see
            :func:`tasks.runtime.task_contract.batch_items`).
        task_id: the Celery task id (recorded as each attempt's decider).
    """
    progress = BatchProgress()
    pending = list(items)
    idle_rounds = 0
    started = time.perf_counter()
    rt.mirror.sync()  # before the lease: a snapshot's load overlaps the lease holder's decisions
    progress.step_s["sync"] = time.perf_counter() - started
    # The collector stays paused for the rounds: its passes run after the batch, with the
    # lease released, not while the other processes wait for it.
    with deciding():
        while pending and idle_rounds < OUTDATED_ATTEMPTS:
            left = _round(rt, pending, task_id, progress)
            idle_rounds = idle_rounds + 1 if len(left) == len(pending) else 0
            pending = left
    if pending:
        log.warning("batch_left_to_watchdog", requests=len(pending))
    return progress


def _round(rt: Runtime, items: list[Item], task_id: str, progress: BatchProgress) -> list[Item]:
    """One lease hold: claim, decide, commit; returns the items to decide again (outdated)."""
    progress.rounds += 1
    try:
        with decide_lease(rt) as lease:
            started = time.perf_counter()
            begun, changes = _claim(rt, lease, items, task_id)
            claimed = time.perf_counter()
            planned = _plan(rt, items, begun, changes, progress)
            decided = time.perf_counter()
            _commit(rt, lease, planned)
    except BaseException:
        rt.mirror.settle(committed=False)  # what did land, the next sync reads from the stream
        raise
    rt.mirror.settle(committed=all(p.foreseen is None or p.commit.booked_version() == p.foreseen
                                   for p in planned))
    steps = progress.step_s
    steps["claim"] += claimed - started
    steps["decide"] += decided - claimed
    steps["commit"] += time.perf_counter() - decided
    return [p.item for p in planned if _outdated(rt, p, progress)]


def _claim(
    rt: Runtime, lease: DecideLease | None, items: list[Item], task_id: str
) -> tuple[list[Begun], Changes | None]:
    """Take the lease, begin every item's attempt and read the changes: one round trip.

    A busy lease is waited for, then everything is claimed again, with the lease or,
    once the wait is over, without it (as a decision alone does: the guards keep the
    ledger and the records safe). A batch waits longer than a decision alone
    (:func:`lease_patience_s`).
    """
    batch = rt.partition.batch()
    acquired = lease.try_acquire(batch) if lease is not None else None
    begins = [batch.script(rt.records.begin_call(rid, seq, attempt, task_id)) for rid, seq, attempt in items]
    changes = rt.mirror.read_changes(batch)
    batch.execute()
    if acquired is not None and lease is not None and not acquired.value:
        lease.wait(lease_patience_s(rt))
        return _claim(rt, None, items, task_id)
    return [begin.value for begin in begins], changes.value if changes is not None else None


def lease_patience_s(rt: Runtime) -> float:
    """How long a batch waits for a busy decide lease: ``decide_lock_wait_s`` + ``decide_lock_ttl_s``.

    Decided without the lease while another process holds it, a batch is refused as
    outdated as soon as the holder commits (every decision after its first read a
    booking ahead), so each such round decides its requests for nothing and takes
    CPU from the holder: in the storm a batch that stopped waiting after 5 s went
    through 12 rounds (534 decisions for 50). A holder that died frees the lease
    within ``decide_lock_ttl_s``, so waiting that much longer costs no liveness.
    """
    return rt.settings.decide_lock_wait_s + rt.settings.decide_lock_ttl_s


def _plan(
    rt: Runtime, items: list[Item], begun: list[Begun], changes: Changes | None, progress: BatchProgress
) -> list[_Planned]:
    """Decide the claimed items in order on one snapshot, booking each decision ahead."""
    fold = rt.mirror.sync(changes)
    planned: list[_Planned] = []
    booked_by: str | None = None  # the last booking applied ahead: it made fold.version
    for item, claim in zip(items, begun, strict=True):
        rid, seq, attempt = item
        if claim.recorded is not None:
            step = resumed(claim.recorded, seq, attempt)
            if step is not None:
                planned.append(_Planned(item, Commit(step), None))
            continue
        if claim.status != "ok" or claim.request_json is None:
            continue  # stale, skipped (parked, done, cancelled) or unknown: as a decision alone
        step, record = decide_on(rt, fold, rid, seq, attempt, claim.request_json, claim.epoch,
                                 booked_by=booked_by)
        progress.decided += 1
        progress.created_ms[rid] = claim.created_ms
        foreseen = None
        if step.action == RESERVE and step.booking is not None:
            rt.mirror.book_ahead(step.booking["event_data"])
            foreseen, booked_by = fold.version, rid
        planned.append(_Planned(item, Commit(step), record, foreseen))
    return planned


def _commit(rt: Runtime, lease: DecideLease | None, planned: list[_Planned]) -> None:
    """Every record and booking, the lease release, every publish or park: one round trip."""
    if not planned:
        return
    held = lease is not None and lease.held
    batch = rt.partition.batch()
    for plan in planned:
        plan.commit.queue_booking(rt, batch, plan.record, books=True)
    if lease is not None and held:
        batch.script(lease.release_call())
    for plan in planned:
        plan.commit.queue_final(rt, batch)
    batch.execute()
    if lease is not None and held:
        lease.released()


def _outdated(rt: Runtime, plan: _Planned, progress: BatchProgress) -> bool:
    """Act on one item's replies as a decision alone does; True when it must be decided again."""
    outcome: Progress = plan.commit.progress(rt, finish=True)
    if outcome.outdated:
        return True
    if outcome.step is not None:
        progress.leftover.append(outcome.step)
    elif outcome.outcome is not None:
        progress.outcomes[plan.item[0]] = outcome.outcome
    return False


def refuse_items(rt: Runtime, task_id: str, dropped: Sequence[tuple[int, str]]) -> None:
    """Dead-letter each malformed item of a batch alone (reason ``invalid_arguments``).

    An item that is not ``[request_id, seq, attempt]`` with a valid id names no request
    the service can answer; like a message whose arguments fail, it finishes none.
    """
    for position, problem in dropped:
        detail = f"{DECIDE_BATCH} item {position}: {problem}"
        rt.deliveries.dead_letter(
            request_id="", task_name=DECIDE_BATCH, task_id=task_id, reason="invalid_arguments",
            detail=detail, deliveries=1, args_json="[]", rejected_json="", finish=False,
        )
        log.warning("batch_item_refused", position=position, problem=problem)
