"""Flows: the workflows that take a ``Runtime``, change state and send decisions.

Above the state objects and the audit log, below the decision pipeline
(which sends through :mod:`~tasks.flows.enqueue` and takes requests in
through :mod:`~tasks.flows.submit`).

* :mod:`~tasks.flows.enqueue` — queueing a decision and arming its watchdog;
* :mod:`~tasks.flows.submit` — taking a request in: record it once and queue
  its decision, or publish its rejection;
* :mod:`~tasks.flows.cluster_changes` — applying cluster events;
* :mod:`~tasks.flows.followups` — a change's follow-up: reschedule, expire, wake;
* :mod:`~tasks.flows.timers` — rescheduling hysteresis and conflict back-offs;
* :mod:`~tasks.flows.cancels` — withdrawing a request;
* :mod:`~tasks.flows.notices` — ``released`` and rescheduling notices on the results stream;
* :mod:`~tasks.flows.vanished` — workers that left: the mass-outage guard;
* :mod:`~tasks.flows.recovery` — export, and rebuilding after a data loss;
* :mod:`~tasks.flows.snapshot_diff` — a snapshot's dry run;
* :mod:`~tasks.flows.metrics` — the domain metrics the flows count, and the state a scrape reads.
"""
