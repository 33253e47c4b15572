"""Intake: what arrives from outside, checked before anything is written (pure: no Redis, no ``Runtime``).

* :mod:`~tasks.intake.requests` — a scheduling request: its id (the
  request-id rule), its canonical form, its ``rejected`` result;
* :mod:`~tasks.intake.snapshots` — a control-plane snapshot of workers and
  instances;
* :mod:`~tasks.intake.cluster_events` — the cluster events
  ``gpusched.cluster_event`` accepts;
* :mod:`~tasks.intake.limits` — sizes, nesting and Unicode of every document taken in;
* :mod:`~tasks.intake.names` — the alphabets of identifiers that become keys or Lua-parsed lists;
* :mod:`~tasks.intake.broker_messages` — a raw broker message, checked before kombu or
  Celery parse it;
* :mod:`~tasks.intake.chain_config` — the plugin chain from ``configs/chain.json``.
"""
