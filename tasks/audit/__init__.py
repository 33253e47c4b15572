"""Audit: the event log, what a decision records, and replaying it.

* :mod:`~tasks.audit.events` — the event envelope and types;
* :mod:`~tasks.audit.streams` — reading Redis Streams (also the results stream);
* :mod:`~tasks.audit.digests` — request, result and inputs digests;
* :mod:`~tasks.audit.decision_event` — what ``sched.decision.made`` records;
* :mod:`~tasks.audit.fold` — the cluster as a fold of its change events;
* :mod:`~tasks.audit.replay` — re-running recorded decisions.
"""
