"""The decision pipeline: one ``gpusched.decide`` message takes a request to its result; and its replay.

* :mod:`~tasks.decision.decide` — the orchestrator: lease, begin, sync the
  mirror, run the core, record, book, publish or park;
* :mod:`~tasks.decision.lease` — the partition's decide lease;
* :mod:`~tasks.decision.core_call` — calling ``scheduler_core.schedule`` on
  the stored request and the mirror's cluster (also what the replay calls);
* :mod:`~tasks.decision.next_step` — from the core's result to reserve, park or publish;
* :mod:`~tasks.decision.booking` — what a reservation books;
* :mod:`~tasks.decision.notices` — the ``unschedulable`` notices the service adds;
* :mod:`~tasks.decision.reserve` — booking, and what a conflict does;
* :mod:`~tasks.decision.publish` — publishing the result or parking the request;
* :mod:`~tasks.decision.replay` — re-running recorded decisions from the event log.

The wire ``Step`` is :mod:`tasks.base.step`; sending a decision is
:mod:`tasks.flows.enqueue`; the chain is :mod:`tasks.intake.chain_config`.
"""
