"""The wire ``Step``: what one stage of a decision hands to the next.

A step is a small JSON object. It is recorded with the decision
(``gpusched:req:<id>`` field ``step``), carried by a ``gpusched.resume``
message when a step is left over, and read back by the watchdog. This module
imports nothing from ``tasks`` but the record states
(:mod:`tasks.base.lifecycle`), so every room can read a step.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from tasks.base.lifecycle import RecordState

#: Step actions: book the placement, park the request, publish the result.
RESERVE = "reserve"
PARK = "park"
PUBLISH = "publish"


@dataclass(slots=True)
class Step:
    """What one stage hands to the next (JSON-serialisable).

    ``result_digest`` names the recorded decision the step comes from; the
    reserve, park and publish scripts act only if the record still holds it.
    """

    request_id: str
    seq: int
    attempt: int
    action: str  # reserve | park | publish
    status: str  # the core's status
    version: int
    epoch: int
    result_digest: str = ""
    booking: dict[str, str] | None = None
    reasons: list[str] = field(default_factory=list)
    park: dict[str, Any] = field(default_factory=dict)
    notice: str = ""
    error: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The message form (its lists and dicts copied; values nested deeper are shared)."""
        return {name: _copied(getattr(self, name)) for name in _STEP_FIELDS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Step:
        """Inverse of :meth:`to_dict`.

        Raises:
            TypeError / ValueError: not a step (unknown or missing fields, wrong types).
        """
        step = cls(**dict(data))
        typed = (
            isinstance(step.request_id, str) and isinstance(step.action, str)
            and all(isinstance(v, int) for v in (step.seq, step.attempt, step.version, step.epoch))
            and isinstance(step.result_digest, str)
        )
        if not typed:
            raise ValueError("malformed step")
        return step


#: Field names of :class:`Step`, in declaration order.
_STEP_FIELDS = tuple(f.name for f in fields(Step))


def _copied(value: Any) -> Any:
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    return value


def resumed_step(record_state: str, step_json: str, seq: int, attempt: int) -> Step | None:
    """The step to continue with when ``(seq, attempt)`` was already decided.

    Args:
        record_state: the request record's ``state``.
        step_json: the step recorded with the decision.
        seq, attempt: the attempt the caller's message carries.

    Returns:
        A decided attempt's recorded step (reserve, park or publish); a
        booked one's publish; None when nothing is left for this message.
    """
    step = Step.from_dict(json.loads(step_json))
    if (step.seq, step.attempt) != (seq, attempt):
        return None
    if record_state == RecordState.BOOKED:
        step.action = PUBLISH
        return step
    return step if record_state == RecordState.DECIDED else None
