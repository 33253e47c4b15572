"""Cluster state and request state in Redis, one object per concern, and the ``Runtime`` that wires them.

Every write is one Lua script (:mod:`~tasks.state.scripts`), guarded so that
it is safe to repeat. Nothing here sends a decision (that is :mod:`tasks.flows`).

* :mod:`~tasks.state.partition` — one partition's client, keys, settings, clock and scripts;
* :mod:`~tasks.state.context` — the per-thread ``Runtime`` every stage takes, and Redis clients;
* :mod:`~tasks.state.sentinel` — the master found through Sentinel;
* :mod:`~tasks.state.outages` — what counts as a Redis outage;
* :mod:`~tasks.state.records` — request records: accept, begin an attempt, record a decision;
* :mod:`~tasks.state.results` — publishing terminal results;
* :mod:`~tasks.state.parked` — parking and waking requests;
* :mod:`~tasks.state.delays` — the outbox, timers and follow-up sets;
* :mod:`~tasks.state.deliveries` — the redelivery guard's counters and dead letters;
* :mod:`~tasks.state.cluster_store` — cluster mutations, the ledger, bookings;
* :mod:`~tasks.state.generation` — the data generation: a wiped or rolled-back Redis;
* :mod:`~tasks.state.replication` — acknowledged writes;
* :mod:`~tasks.state.ledger` — per-GPU capacity and claims arithmetic;
* :mod:`~tasks.state.fold` — the cluster as a fold of its change events;
* :mod:`~tasks.state.mirror` — the per-process in-memory copy of the cluster;
* :mod:`~tasks.state.streams` — reading Redis Streams (also the results stream);
* :mod:`~tasks.state.parking` — parking reasons and wake rules.
"""
