"""Cluster state and request state in Redis, one object per concern.

Every write is one Lua script (:mod:`~tasks.state.scripts`), guarded so that
it is safe to repeat.

* :mod:`~tasks.state.keys` — every key, stream and queue name;
* :mod:`~tasks.state.partition` — one partition's client, keys, clock and scripts;
* :mod:`~tasks.state.records` — request records: accept, begin an attempt, record a decision;
* :mod:`~tasks.state.results` — publishing terminal results;
* :mod:`~tasks.state.parked` — parking and waking requests;
* :mod:`~tasks.state.delays` — the outbox, timers and follow-up sets;
* :mod:`~tasks.state.deliveries` — the redelivery guard's counters and dead letters;
* :mod:`~tasks.state.cluster_store` — cluster mutations, the ledger, bookings;
* :mod:`~tasks.state.rows` — stored rows, instance keys and metadata;
* :mod:`~tasks.state.ledger` — per-GPU capacity and claims arithmetic;
* :mod:`~tasks.state.mirror` — the per-process in-memory copy of the cluster;
* :mod:`~tasks.state.parking` — parking reasons and wake rules;
* :mod:`~tasks.state.cluster_changes` — applying cluster events;
* :mod:`~tasks.state.followups` — a change's follow-up: reschedule, expire, wake;
* :mod:`~tasks.state.timers` — outage clocks, rescheduling hysteresis, conflict back-offs.
"""
