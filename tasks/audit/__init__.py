"""Audit: what a decision records, the trimmed log's archive, checkpoints and retention.

The event envelope (:mod:`tasks.base.events`), the digests
(:mod:`tasks.base.digests`), stream reading (:mod:`tasks.state.streams`) and
the cluster fold (:mod:`tasks.state.fold`) sit on lower floors; replaying the
log runs decisions, so it is :mod:`tasks.decision.replay`.

* :mod:`~tasks.audit.decision_event` — what ``sched.decision.made`` records;
* :mod:`~tasks.audit.archive` — the trimmed log as JSON lines;
* :mod:`~tasks.audit.checkpoints` — the cluster at a version, where replay can start;
* :mod:`~tasks.audit.retention` — checkpointing, trimming behind them, expiring parked requests.
"""
