"""Shrunk parity cases on disk: ``regressions/`` (we match them) and ``pending/`` (not yet).

A case file holds ``{"rule": ..., "request": ..., "expected": ...}``: what it
pins, the (shrunk) request, and GPUStack's comparable result for it
(``compare.comparable`` of the oracle's answer). ``test_parity_regressions``
decides every file in ``regressions/`` with ``scheduler_core.schedule`` and
needs no oracle. ``--record`` writes new cases to ``pending/`` (they differ
when recorded); ``--promote`` moves those we now match to ``regressions/``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.parity.check import Outcome, classify, ours
from tests.parity.compare import comparable, differences
from tests.parity.generator import scenario_by_id
from tests.parity.shrink import shrink

Json = dict[str, Any]
HERE = Path(__file__).resolve().parent
REGRESSIONS = HERE / "regressions"
PENDING = HERE / "pending"


def case_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json"))


def load(path: Path) -> Json:
    case: Json = json.loads(path.read_text())
    return case


def mismatch(case: Json) -> list[str]:
    """Paths where our decision of the case's request differs from its expected result."""
    return differences(comparable(ours(case["request"])), case["expected"])


def _slug(group: str) -> str:
    words = re.sub(r"[^a-z0-9]+", "-", group.lower().replace("≠", "-vs-")).strip("-")
    return words[:60].rstrip("-")


def write_case(path: Path, case: Json) -> None:
    """Write a case file (one key per line, stable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(case, indent=1, ensure_ascii=False) + "\n")


def shrink_case(decide: Callable[[Json], Json], outcome: Outcome) -> Json:
    """The outcome's scenario, shrunk while it differs in the same group, as a pending case."""
    original = scenario_by_id(outcome.id).request

    def same(request: Json) -> bool:
        again = classify(outcome.id, outcome.tags, request, ours(request), decide(request))
        return again.verdict == "differ" and again.group == outcome.group

    small = shrink(original, same)
    expected = comparable(decide(small))
    return {
        "rule": f"GPUStack parity [{outcome.group}]: shrunk from scenario {outcome.id}",
        "request": small,
        "expected": expected,
        "gpusched_when_recorded": comparable(ours(small)),
    }


def record(decide: Callable[[Json], Json], groups: dict[str, list[Outcome]]) -> dict[str, Path]:
    """Shrink each group's first example into ``pending/``; returns the file written per group."""
    written: dict[str, Path] = {}
    for group, outcomes in groups.items():
        first = outcomes[0]
        case = shrink_case(decide, first)
        path = PENDING / f"{_slug(group)}--{first.id.replace(':', '-')}.json"
        write_case(path, case)
        written[group] = path
    return written


def promote() -> list[str]:
    """Move every pending case we now decide as expected into ``regressions/``."""
    lines = []
    for path in case_files(PENDING):
        case = load(path)
        paths = mismatch(case)
        if paths:
            lines.append(f"pending   {path.name}: still differs in {', '.join(paths)}")
            continue
        case.pop("gpusched_when_recorded", None)
        write_case(REGRESSIONS / path.name, case)
        path.unlink()
        lines.append(f"promoted  {path.name}")
    return lines
