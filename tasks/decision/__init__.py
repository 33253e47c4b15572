"""The decision pipeline: one ``gpusched.decide`` message takes a request to its result.

* :mod:`~tasks.decision.step` — the wire ``Step`` one stage hands the next (a leaf);
* :mod:`~tasks.decision.decide` — the orchestrator: lease, begin, sync the
  mirror, run the core, record, book, publish or park;
* :mod:`~tasks.decision.lease` — the partition's decide lease;
* :mod:`~tasks.decision.core_call` — calling ``scheduler_core.schedule`` on
  the stored request and the mirror's cluster (also what the replay calls);
* :mod:`~tasks.decision.chain_config` — the plugin chain from ``configs/chain.json``;
* :mod:`~tasks.decision.next_step` — from the core's result to reserve, park or publish;
* :mod:`~tasks.decision.booking` — what a reservation books;
* :mod:`~tasks.decision.notices` — the ``unschedulable`` notices the service adds;
* :mod:`~tasks.decision.reserve` — booking, and what a conflict does;
* :mod:`~tasks.decision.publish` — publishing the result or parking the request;
* :mod:`~tasks.decision.enqueue` — queueing a decision and arming its watchdog.
"""
