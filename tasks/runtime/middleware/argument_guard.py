"""A message whose arguments its task cannot take is dead-lettered alone, never retried, never run.

Celery binds a message's ``args`` and ``kwargs`` to the task function only
when it calls it: an unexpected keyword argument, a missing one or a wrong
wire type used to raise inside the task, be retried as a task error and,
after ``max_task_errors`` deliveries, be dead-lettered *and finish the
request the message named* — so a forged ``gpusched.decide`` for another
request's id (right ``seq`` and ``attempt``, plus a stray keyword) ended that
request as ``rejected``/``dead_lettered`` while its own message was in
flight. The shape of the arguments is the message's fault, not the
request's: :func:`tasks.runtime.task_contract.argument_problem` checks it
before anything runs, and a message it refuses is dead-lettered (reason
``invalid_arguments``) without touching any request (``finish=False``).
"""

from __future__ import annotations

from typing import Any

from tasks.runtime.middleware.base import Delivery, Middleware, Proceed
from tasks.runtime.middleware.dead_letters import give_up
from tasks.runtime.task_contract import argument_problem

#: The dead-letter reason of a message whose arguments its task cannot take.
INVALID_ARGUMENTS = "invalid_arguments"


class WellFormedArguments(Middleware):
    """Dead-letters (alone) a message whose arguments do not fit its task's signature and types."""

    def around_task(self, delivery: Delivery, proceed: Proceed) -> Any:
        """Run the rest of the stack, or dead-letter the message without finishing any request."""
        problem = argument_problem(delivery.task_name, delivery.args, delivery.kwargs)
        if problem is not None:
            give_up(delivery, INVALID_ARGUMENTS, f"{delivery.task_name}: {problem}", 1, finish=False)
        return proceed()
