"""Each queue runs only its own tasks: a message on the wrong queue is dead-lettered, never run.

Celery runs a message by its task name, whatever queue it came from, and who
may push onto one queue is Redis's decision (ACL users, :mod:`tasks.runtime.acl`):
a submitter may push onto ``gpusched.requests`` and nothing else. Without this
guard a ``gpusched.cluster_event`` message pushed there would change the
cluster anyway. So each of the partition's queues accepts only its tasks —
``.requests``: ``gpusched.decide``; ``.commits``: ``gpusched.resume``;
``.cluster``: ``gpusched.cluster_event`` and ``gpusched.drain_delayed`` — and
any other message taken from it is dead-lettered (reason ``wrong_queue``) and
acknowledged. The queue is the one the message was really taken from
(:class:`tasks.runtime.broker.RideOutChannel`), not the routing key its
publisher claimed. A message run in process (no queue) or taken from a queue
that is not the partition's passes.
"""

from __future__ import annotations

from typing import Any

from tasks.base.keys import Keys
from tasks.runtime.middleware.base import Delivery, Middleware, Proceed
from tasks.runtime.middleware.dead_letters import give_up
from tasks.runtime.task_contract import CLUSTER_EVENT, DECIDE, DECIDE_BATCH, DRAIN_DELAYED, RESUME


def accepted_tasks(keys: Keys) -> dict[str, frozenset[str]]:
    """Queue name → the task names it runs."""
    return {
        keys.requests_queue: frozenset({DECIDE, DECIDE_BATCH}),
        keys.commits_queue: frozenset({RESUME}),
        keys.cluster_queue: frozenset({CLUSTER_EVENT, DRAIN_DELAYED}),
    }


class OnlyItsOwnQueue(Middleware):
    """Dead-letters a message whose task its queue does not run."""

    def around_task(self, delivery: Delivery, proceed: Proceed) -> Any:
        """Run the rest of the stack, or dead-letter a message on the wrong queue."""
        if delivery.queue is not None:
            allowed = accepted_tasks(delivery.rt.keys).get(delivery.queue)
            if allowed is not None and delivery.task_name not in allowed:
                give_up(delivery, "wrong_queue",
                        f"{delivery.task_name} is not run from {delivery.queue}", 0)
        return proceed()
