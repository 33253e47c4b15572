"""``make parity``: generated requests (and examples/) decided by gpusched and by GPUStack.

    python -m tests.parity.run --seeds 1 2 --count 2500      # the parity run
    python -m tests.parity.run --record                      # + shrink each differing group into pending/
    python -m tests.parity.run --promote                     # pending/ cases we now match -> regressions/
    python -m tests.parity.run --show 1-17                   # one scenario: both comparable results
    python -m tests.parity.run --pin                         # a shrunk regression case per issue-8 rule

Prints: scenarios run, the status distribution, identical, excused (per
deliberate difference), differing (grouped by which fields differ, with the
first scenario id of each group); exits 1 on any difference. ``--markdown
FILE`` also writes that summary as Markdown. Needs the oracle's virtualenv
(``bash tools/gpustack-oracle/setup.sh``; see ``oracle_client``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.parity.check import Outcome, classify, ours
from tests.parity.compare import comparable, differences
from tests.parity.generator import Scenario, example_scenarios, generate, scenario_by_id
from tests.parity.oracle_client import REPO, Oracle
from tests.parity.pin import RULES, pin
from tests.parity.regressions_io import PENDING, REGRESSIONS, promote, record

Json = dict[str, Any]


class OraclePool:
    """Several oracle processes; a batch is sent to all, our side is decided meanwhile, then read back."""

    def __init__(self, size: int) -> None:
        self.oracles = [Oracle() for _ in range(max(1, size))]

    def decide_batch(self, batch: list[Scenario]) -> Iterator[tuple[Scenario, Json, Json]]:
        for oracle, item in zip(self.oracles, batch, strict=False):
            oracle.send(item.request)
        mine = [ours(item.request) for item in batch]
        for oracle, item, result in zip(self.oracles, batch, mine, strict=False):
            yield item, result, oracle.receive()

    def decide(self, request: Json) -> Json:
        return self.oracles[0].decide(request)

    def close(self) -> None:
        for oracle in self.oracles:
            oracle.close()


@dataclass
class Summary:
    """Counts of a run and the first example of each differing group."""

    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)

    def count(self, verdict: str) -> int:
        return sum(1 for o in self.outcomes if o.verdict == verdict)

    def statuses(self) -> Counter[str]:
        return Counter(o.theirs_status for o in self.outcomes)

    def excused(self, verdict: str = "excused") -> Counter[str]:
        return Counter(o.excuse for o in self.outcomes if o.verdict == verdict and o.excuse)

    def groups(self) -> dict[str, list[Outcome]]:
        out: dict[str, list[Outcome]] = {}
        for o in self.outcomes:
            if o.verdict == "differ":
                out.setdefault(o.group, []).append(o)
        return dict(sorted(out.items(), key=lambda item: -len(item[1])))


def batched(items: Iterable[Scenario], size: int) -> Iterator[list[Scenario]]:
    batch: list[Scenario] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def run(pool: OraclePool, scenarios: Iterable[Scenario], progress: bool = False) -> Summary:
    summary = Summary()
    start = time.monotonic()
    for batch in batched(scenarios, len(pool.oracles)):
        for item, mine, theirs in pool.decide_batch(batch):
            summary.add(classify(item.id, item.tags, item.request, mine, theirs))
        if progress and len(summary.outcomes) % 500 < len(batch):
            print(
                f"  ... {len(summary.outcomes)} scenarios, {summary.count('differ')} differ", file=sys.stderr
            )
    summary.seconds = time.monotonic() - start
    return summary


def report(summary: Summary, recorded: dict[str, Path] | None = None) -> list[str]:
    """The summary as text lines."""
    n = len(summary.outcomes)
    lines = [
        f"parity: {n} scenarios in {summary.seconds:.0f} s: {summary.count('identical')} identical, "
        f"{summary.count('excused')} excused, {summary.count('oracle_gap')} oracle gaps, "
        f"{summary.count('differ')} differ"
    ]
    statuses = ", ".join(f"{k} {v} ({100 * v / max(n, 1):.0f}%)" for k, v in summary.statuses().most_common())
    lines.append(f"GPUStack's statuses: {statuses}")
    for name, count in summary.excused().most_common():
        lines.append(f"excused  {count:5d}  {name}")
    for name, count in summary.excused("oracle_gap").most_common():
        lines.append(
            f"oracle gap {count:3d}  {name} (the oracle cannot reproduce GPUStack here; not counted)"
        )
    for group, items in summary.groups().items():
        example = items[0].id
        where = f"  -> {recorded[group].relative_to(REPO)}" if recorded and group in recorded else ""
        lines.append(f"differ   {len(items):5d}  [{group}]  e.g. {example}{where}")
    return lines


def markdown(summary: Summary, recorded: dict[str, Path], argv: list[str]) -> str:
    """The summary as a Markdown report (for a findings file)."""
    lines = [
        "# Parity findings (generated by `python -m tests.parity.run`)",
        "",
        f"Command: `python -m tests.parity.run {' '.join(argv)}`",
        "",
        "```",
        *report(summary, recorded),
        "```",
        "",
    ]
    if summary.groups():
        lines += ["## Differing groups", ""]
    for group, items in summary.groups().items():
        ids = ", ".join(o.id for o in items[:8])
        file = recorded.get(group)
        lines.append(
            f"- **{group}** — {len(items)} scenarios ({ids}{', ...' if len(items) > 8 else ''})"
            + (f"; shrunk: `{file.relative_to(REPO)}`" if file else "")
        )
    return "\n".join(lines) + "\n"


def show(pool: OraclePool, scenario_id: str) -> None:
    item = scenario_by_id(scenario_id)
    mine, theirs = ours(item.request), pool.decide(item.request)
    print(json.dumps({"id": item.id, "tags": item.tags, "request": item.request}, indent=1))
    print("differences:", differences(comparable(mine), comparable(theirs)))
    print("ours:  ", json.dumps(comparable(mine), indent=1))
    print("theirs:", json.dumps(comparable(theirs), indent=1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.parity.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--count", type=int, default=2500, help="scenarios per seed")
    parser.add_argument("--no-examples", action="store_true", help="skip the requests in examples/")
    parser.add_argument("--oracles", type=int, default=2, help="oracle processes in parallel")
    parser.add_argument("--record", action="store_true", help="shrink each differing group's first example")
    parser.add_argument("--promote", action="store_true", help="move pending regressions we now match")
    parser.add_argument("--markdown", type=Path, help="also write the summary as Markdown to this file")
    parser.add_argument("--show", metavar="ID", help="print one scenario and both results")
    parser.add_argument("--pin", action="store_true", help="write a shrunk regression case per issue-8 rule")
    args = parser.parse_args(argv)
    if args.promote:
        for line in promote():
            print(line)
        return 0
    pool = OraclePool(1 if args.show or args.pin else args.oracles)
    try:
        if args.show:
            show(pool, args.show)
            return 0
        if args.pin:
            for rule in RULES:
                path = pin(rule, pool.decide, tuple(args.seeds), args.count)
                print(f"{rule.tag:24s} {path.relative_to(REPO) if path else 'no qualifying scenario'}")
            return 0
        scenarios: Iterable[Scenario] = (s for seed in args.seeds for s in generate(seed, args.count))
        if not args.no_examples:
            scenarios = (s for source in (example_scenarios(), scenarios) for s in source)
        summary = run(pool, scenarios, progress=True)
        recorded = record(pool.decide, summary.groups()) if args.record else {}
    finally:
        pool.close()
    print("\n".join(report(summary, recorded)))
    if args.markdown:
        args.markdown.write_text(markdown(summary, recorded, sys.argv[1:] if argv is None else argv))
    print(f"regressions: {REGRESSIONS.relative_to(REPO)}, pending: {PENDING.relative_to(REPO)}")
    return 1 if summary.count("differ") else 0


if __name__ == "__main__":
    sys.exit(main())
