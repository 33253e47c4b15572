"""Giving up on a task message: dead-letter it, and finish the request it drove.

Shared by the redelivery guard (a message whose deliveries keep dying) and
the task-error retries (a message that keeps raising). Not a middleware: the
action both take when their budget is spent.
"""

from __future__ import annotations

import json
from typing import NoReturn

from celery.exceptions import Ignore  # type: ignore[import-untyped]

from scheduler_core import ErrorOut, ScheduleResult
from tasks.base.logging import get_logger
from tasks.flows import metrics
from tasks.runtime.middleware.base import Delivery
from tasks.runtime.task_contract import DrivenRequest, driven_requests

log = get_logger(__name__)


def give_up(delivery: Delivery, reason: str, detail: str, count: int, *, finish: bool = True) -> NoReturn:
    """Dead-letter the message; finish its request if the message provably drives it.

    A booked request gets its recorded ``scheduled`` result, any other
    unfinished one a terminal ``rejected`` result (``error.code =
    dead_lettered``) — only when ``dead_letter.lua`` finds that the message owns
    the request's current step (it claimed the attempt, carries the recorded
    decision, or accepted the raw request). A batch (``gpusched.decide_batch``) is
    dead-lettered whole: one dead letter per request it carries, each request
    finished under the same rule.

    Args:
        finish: False for a message that failed validation (its arguments): it is
            dead-lettered alone and never finishes a request, whichever it names.

    Raises:
        celery.exceptions.Ignore: always (the message is acknowledged).
    """
    drives = driven_requests(delivery.task_name, delivery.args, delivery.kwargs) if finish else []
    for driven in drives or [DrivenRequest("")]:  # a batch: one dead letter per request, each answered
        result_id = _dead_letter(delivery, driven, reason, detail, count, finish=finish)
        log.error("dead_lettered", reason=reason, detail=detail, request_id=driven.request_id,
                  result_id=result_id)
    metrics.count_dead_letter(reason)
    raise Ignore()


def _dead_letter(
    delivery: Delivery, driven: DrivenRequest, reason: str, detail: str, count: int, *, finish: bool
) -> str:
    """One dead letter for the request ``driven`` of the message; the results entry id (or "")."""
    rejection = ScheduleResult(
        request_id=driven.request_id or "-",
        status="rejected",
        error=ErrorOut(
            code="dead_lettered",
            message=f"gave up on {delivery.task_name} after {count} deliveries: {detail}",
            field=None,
        ),
    ).model_dump_json()
    raw = driven.raw is not None
    _, result_id = delivery.rt.deliveries.dead_letter(
        request_id=driven.request_id, task_name=delivery.task_name, task_id=delivery.task_id,
        reason=reason, detail=detail, deliveries=count,
        args_json=json.dumps(list(delivery.args), default=str), rejected_json=rejection,
        seq=driven.seq, attempt=driven.attempt, result_digest=driven.result_digest,
        intake_task=delivery.task_id if raw else "",
        request_json=json.dumps(driven.raw, sort_keys=True, default=str) if raw else "",
        finish=finish,
    )
    return result_id
