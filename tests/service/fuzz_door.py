"""The service's raw queue door under fuzzed requests: raw ``gpusched.decide`` messages to real workers.

Each request is pushed (``LPUSH``, as any Celery-protocol client or a hostile
one could) as the raw argument of ``gpusched.decide`` onto
``gpusched.requests``. :func:`through_raw_door` waits until the pipeline is
idle and reports what did not survive: a worker process that died (its main
process, or a pool process lost), a request with no terminal result, a
result or dead letter that does not encode, a rejection naming no field.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from fuzzing import encodable, result_problems
from service.raw_messages import envelope
from service.support import Deployment

from tasks.intake.broker_messages import inspect_message
from tasks.intake.requests import request_id_of
from tasks.runtime.broker_door import SERVICE_TASKS
from tasks.runtime.task_contract import DECIDE
from tasks.state.streams import iter_stream

#: What a worker's log says when one of its processes died or its consumer stopped.
DEATH_MARKS = ("Unrecoverable error", "WorkerLostError", "exited with 'signal", "Process 'ForkPoolWorker")


@dataclass
class DoorReport:
    """What the raw door did with a batch of messages."""

    messages: int = 0
    results: int = 0
    dead_letters: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


def expected_id(raw: bytes, request: dict[str, Any], settings: Any) -> str:
    """The id the service answers a raw request under: the door's for a message it refuses
    with a request (too deep), else the intake's rule."""
    verdict = inspect_message(raw, max_bytes=settings.max_message_bytes, tasks=SERVICE_TASKS,
                              intake_task=DECIDE, max_time_limit=settings.task_time_limit_s)
    if verdict is not None and verdict.request is not None:
        return verdict.request.request_id
    return request_id_of(request)


def through_raw_door(d: Deployment, requests: list[dict[str, Any]], timeout: float) -> DoorReport:
    """Push every request as a raw message, wait for the pipeline to go idle, check everything.

    Raises:
        AssertionError: the pipeline did not go idle within ``timeout`` seconds.
    """
    started = time.monotonic()
    expected: set[str] = set()
    for request in requests:
        raw = envelope(args=[request])
        expected.add(expected_id(raw, request, d.settings))
        d.redis.lpush(d.keys.requests_queue, raw)
    report = DoorReport(messages=len(requests))
    deadline = started + timeout
    while not _settled(d):
        if time.monotonic() > deadline:
            raise AssertionError(f"the pipeline did not go idle within {timeout:g} s")
        time.sleep(0.5)
    report.seconds = time.monotonic() - started
    answered = _check_results(d, report)
    _check_dead_letters(d, report)
    missing = sorted(expected - answered)
    report.problems.extend(f"no terminal result for {rid!r}" for rid in missing[:20])
    if len(missing) > 20:
        report.problems.append(f"... {len(missing)} requests without a terminal result in all")
    report.problems.extend(_deaths(d))
    return report


def _settled(d: Deployment) -> bool:
    return d.idle() and (time.sleep(0.5) is None) and d.idle()


def _check_results(d: Deployment, report: DoorReport) -> set[str]:
    answered: set[str] = set()
    for _, fields in iter_stream(d.redis, d.keys.results):
        report.results += 1
        status = fields.get("status", "")
        report.statuses[status] = report.statuses.get(status, 0) + 1
        # a terminal result, or the notice of a request parked until the cluster changes
        answered.add(fields["request_id"])
        report.problems.extend(f"result of {fields.get('request_id')!r}: {problem}"
                               for problem in result_problems(fields.get("result", "")))
    return answered


def _check_dead_letters(d: Deployment, report: DoorReport) -> None:
    for _, fields in iter_stream(d.redis, d.keys.deadletter):
        report.dead_letters += 1
        report.reasons[fields.get("reason", "")] = report.reasons.get(fields.get("reason", ""), 0) + 1
        texts = [*fields.values(), *json.loads(fields.get("args") or "{}").values()]
        if not all(encodable(str(text)) for text in texts):
            report.problems.append(f"a dead letter does not encode: {fields.get('reason')}")


def _deaths(d: Deployment) -> list[str]:
    deaths: list[str] = []
    for worker in d.workers:
        if worker.process is None or worker.process.poll() is not None:
            deaths.append(f"worker {worker.name} exited: {worker.log_tail(5)}")
        log = worker.log_path.read_text(errors="replace") if worker.log_path.exists() else ""
        deaths.extend(f"worker {worker.name} log: {mark}" for mark in DEATH_MARKS if mark in log)
    return deaths
