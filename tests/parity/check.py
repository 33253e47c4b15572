"""Decide one request both ways and classify the outcome."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from scheduler_core import schedule
from tests.parity.compare import comparable, differences
from tests.parity.excuses import excuse, oracle_gap

Json = dict[str, Any]


@dataclass(frozen=True)
class Outcome:
    """How one request came out.

    ``verdict`` is ``identical``; ``excused`` (``excuse`` names the deliberate difference); ``oracle_gap``
    (``excuse`` names the oracle limitation, see ``excuses.ORACLE_GAPS``); or ``differ``.
    """

    id: str
    tags: tuple[str, ...]
    verdict: str
    paths: tuple[str, ...]
    excuse: str | None
    ours_status: str
    theirs_status: str

    @property
    def group(self) -> str:
        """What differs, as a grouping key (``status`` first when the statuses differ)."""
        if self.ours_status != self.theirs_status:
            return f"status {self.ours_status}≠{self.theirs_status}: " + ", ".join(self.paths)
        return ", ".join(self.paths)


def ours(request: Json) -> Json:
    """gpusched's result as JSON."""
    result: Json = json.loads(schedule(request).model_dump_json())
    return result


def classify(scenario_id: str, tags: tuple[str, ...], request: Json, mine: Json, theirs: Json) -> Outcome:
    """Compare two raw results of ``request``."""
    paths = tuple(differences(comparable(mine), comparable(theirs)))
    if not paths:
        return Outcome(
            scenario_id, tags, "identical", paths, None, str(mine.get("status")), str(theirs.get("status"))
        )
    verdict, reason = "differ", None
    if (deliberate := excuse(request, mine, theirs)) is not None:
        verdict, reason = "excused", deliberate
    elif (gap := oracle_gap(mine, theirs)) is not None:
        verdict, reason = "oracle_gap", gap
    return Outcome(
        scenario_id, tags, verdict, paths, reason, str(mine.get("status")), str(theirs.get("status"))
    )
