"""The ``unschedulable`` notices the service adds to the core's results.

The core may pick an overcommitted candidate (a manual GPU selection larger
than what is free) and a decision may lose every reservation race; in both
cases the request waits parked and its notice says why in the service's words.
"""

from __future__ import annotations

from scheduler_core import ScheduleResult

#: Text appended to an overcommitted pick the ledger will not book.
OVERCOMMIT_MESSAGE = (
    "The selected GPUs do not have the memory this placement claims; gpusched never books "
    "past allocatable memory, so the request waits for the selected GPUs to free up."
)
#: Text of the notice published when conflicts exhaust a decision's attempts.
EXHAUSTED_MESSAGE = (
    "The cluster kept changing under the decision (reservation conflicts); "
    "the request waits for capacity to be freed."
)


def overcommit_notice(result: ScheduleResult) -> ScheduleResult:
    """The ``unschedulable`` notice for an overcommitted pick the ledger will not book."""
    return result.model_copy(
        update={
            "status": "unschedulable",
            "selected": None,
            "launch": None,
            "messages": [*result.messages, OVERCOMMIT_MESSAGE],
        }
    )


def exhausted_notice(request_id: str) -> ScheduleResult:
    """The ``unschedulable`` notice of a request whose reservation attempts all conflicted."""
    return ScheduleResult(request_id=request_id, status="unschedulable", messages=[EXHAUSTED_MESSAGE])
