"""Edges: how people and programs use the service.

* :mod:`~tasks.edges.client` — ``ServiceClient`` and ``submit``;
* :mod:`~tasks.edges.cli` — the ``gpusched`` command line
  (:mod:`~tasks.edges.cli_offline`, :mod:`~tasks.edges.cli_service`);
* :mod:`~tasks.edges.demo` — ``make demo`` (:mod:`~tasks.edges.demo_offline`,
  :mod:`~tasks.edges.demo_service`);
* :mod:`~tasks.edges.localrun` — local ``redis-server`` and worker processes
  for the demo, the tests and the benchmark.
"""
