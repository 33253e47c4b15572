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
    #: our error code when we rejected (it names the cause better than the differing fields do)
    ours_error: str | None = None

    @property
    def group(self) -> str:
        """What differs, as a grouping key (``status`` first when the statuses differ)."""
        cause = f"[{self.ours_error}] " if self.ours_error else ""
        if self.ours_status != self.theirs_status:
            return f"{cause}status {self.ours_status}≠{self.theirs_status}: " + ", ".join(self.paths)
        return cause + ", ".join(self.paths)


def ours(request: Json) -> Json:
    """gpusched's result as JSON."""
    result: Json = json.loads(schedule(request).model_dump_json())
    return result


def classify(scenario_id: str, tags: tuple[str, ...], request: Json, mine: Json, theirs: Json) -> Outcome:
    """Compare two raw results of ``request``."""
    paths = tuple(differences(comparable(mine), comparable(theirs)))
    statuses = (str(mine.get("status")), str(theirs.get("status")))
    code = (mine.get("error") or {}).get("code") if mine.get("status") == "rejected" else None
    if not paths:
        return Outcome(scenario_id, tags, "identical", paths, None, *statuses)
    verdict, reason = "differ", None
    if (deliberate := excuse(request, mine, theirs)) is not None:
        verdict, reason = "excused", deliberate
    elif (gap := oracle_gap(request, mine, theirs)) is not None:
        verdict, reason = "oracle_gap", gap
    return Outcome(scenario_id, tags, verdict, paths, reason, *statuses, ours_error=code)
