"""The service's Celery task names (Contract 3, the wire contract): a leaf every room may read.

:mod:`tasks.runtime.task_contract` says what each task takes; the rooms below the runtime
(a batch's dead letters, the enqueuers) only need the names.
"""

from __future__ import annotations

DECIDE = "gpusched.decide"
DECIDE_BATCH = "gpusched.decide_batch"
RESUME = "gpusched.resume"
CLUSTER_EVENT = "gpusched.cluster_event"
DRAIN_DELAYED = "gpusched.drain_delayed"
