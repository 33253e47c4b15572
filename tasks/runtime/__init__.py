"""Runtime: the Celery app and tasks, the middleware, the drainer: how a worker node runs.

* :mod:`~tasks.runtime.task_contract` — task names, and which request a message drives;
* :mod:`~tasks.runtime.preflight` — what a worker node checks before it consumes anything;
* :mod:`~tasks.runtime.celery_app` — the Celery app, its configuration and signals;
* :mod:`~tasks.runtime.broker` and :mod:`~tasks.runtime.broker_door` — the broker channel, and
  the transport and consumer that dead-letter what no task can use;
* :mod:`~tasks.runtime.worker_tasks` — the four Celery tasks;
* :mod:`~tasks.runtime.middleware` — one concern per module around each task and each node;
* :mod:`~tasks.runtime.drainer` — one pass over the delay sets;
* :mod:`~tasks.runtime.periodic` — the thread the drainer and the heartbeat run on;
* :mod:`~tasks.runtime.oom_watch`, :mod:`~tasks.runtime.health`, :mod:`~tasks.runtime.acl`.
"""
