"""How ``gpusched`` commands print: ``-o text|json`` and the text views (``list``, ``health``, ...).

Every command that prints a result takes ``-o text|json`` (``--output``).
The default is the command's contract: ``schedule`` prints Contract 1's
result JSON, ``submit`` prints JSON unless standard output is a terminal (a
control plane or script reads JSON; a person at a terminal gets the demo's
block view), and ``describe``, ``health``, ``replay``, ``acl`` and ``list``
print text. ``--json`` (``describe``, ``cluster show``, ``list``) and
``--pretty`` (indented JSON) keep working.

Nothing here imports Celery or Redis at import time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from tasks.edges.cli_support import CliError
from tasks.edges.text_table import clip, table

#: ``-o`` choices.
FORMATS = ("text", "json")
#: ``--since`` units.
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def add_output_option(parser: argparse.ArgumentParser, default: str | None) -> None:
    """Add ``-o/--output text|json`` (``default`` None: JSON unless stdout is a terminal)."""
    shown = default or "json, or text on a terminal"
    parser.add_argument("-o", "--output", choices=FORMATS, default=default,
                        help=f"output format (default: {shown})")


def output_format(args: argparse.Namespace) -> str:
    """The chosen format: ``-o``, ``--json``, else the command's default (terminal-dependent when None)."""
    if getattr(args, "json", False):
        return "json"
    chosen: str | None = getattr(args, "output", None)
    if chosen:
        return chosen
    stdout = sys.stdout
    return "text" if stdout is not None and stdout.isatty() else "json"


def print_json(value: Any, pretty: bool = False) -> None:
    """One JSON document on stdout (indented with ``pretty``)."""
    print(json.dumps(value, indent=2 if pretty else None))


def width() -> int:
    """The terminal's width (110 when not a terminal)."""
    return shutil.get_terminal_size((110, 24)).columns


# ------------------------------------------------------------------- durations
def duration_s(text: str) -> int:
    """An argparse type: ``90s``, ``15m``, ``1h``, ``2d`` or a number of seconds."""
    number, unit = (text[:-1], text[-1]) if text and text[-1] in _UNITS else (text, "s")
    try:
        value = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a duration (90s, 15m, 1h, 2d)") from None
    if not value > 0 or value > 10 * 365 * 86400:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} must be a duration above 0")
    return round(value * _UNITS[unit])


def age(seconds: int | None) -> str:
    """``42s``, ``17m``, ``3h05m``, ``2d04h``; ``-`` for None."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


# ----------------------------------------------------------------- text views
def render_listing(listing: Mapping[str, Any], columns: int | None = None) -> str:
    """``gpusched list`` as text: the counts per state (and parked reason), then a row per request."""
    columns = columns or width()
    summary = listing["summary"]
    counts = ", ".join(f"{count} {state}" for state, count in summary["states"].items() if count)
    lines = [f"Requests: {counts or 'none'}"]
    if summary["parked_reasons"]:
        lines.append("Parked by reason: " + ", ".join(f"{reason} {count}"
                                                      for reason, count in summary["parked_reasons"].items()))
    scanned = listing["scanned"]
    if scanned["results_read"] and not scanned["complete"]:
        lines.append(f"(finished requests: the newest {scanned['results_read']} results, back to "
                     f"{scanned['oldest']}; narrow with --since)")
    rows = [[r["request_id"], r["state"], age(r["age_s"]), age(r["since_s"]), r["model"] or "-", _detail(r)]
            for r in listing["requests"]]
    lines += ["", *table(["REQUEST", "STATE", "AGE", "SINCE", "MODEL", "WHERE / WHY"], rows)]
    return "\n".join(clip(line, columns) for line in lines)


def _detail(row: Mapping[str, Any]) -> str:
    """Where a request is placed, what it waits for, why it was refused, where it moved."""
    parts = []
    if row["reasons"]:
        parts.append("waits for " + ", ".join(row["reasons"]))
    for node in row["placement"]:
        parts.append(f"{node['worker']} {','.join(node['gpus'])}")
    if row["error"]:
        where = f"{row['error'].get('field')}: " if row["error"].get("field") else ""
        parts.append(f"{where}{row['error'].get('message')}")
    if row["moved_to"]:
        parts.append(f"moved to {row['moved_to']}")
    if row["reschedule_of"]:
        parts.append(f"replaces {row['reschedule_of']}")
    return "; ".join(" ".join(str(part).split()) for part in parts) or "-"


def render_health(verdicts: Sequence[Any]) -> str:
    """One line: ``healthy: redis ...; data ...; workers ...``."""
    return "healthy: " + "; ".join(f"{v.name} {v.detail}" for v in verdicts)


def health_json(verdicts: Sequence[Any], healthy: bool,
                extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``gpusched health -o json``: the same shape as a node's ``/healthz``."""
    return {"status": "ok" if healthy else "unhealthy",
            "checks": [{"name": v.name, "ok": v.ok, "detail": v.detail} for v in verdicts], **(extra or {})}


def replay_json(report: Any) -> dict[str, Any]:
    """``gpusched replay -o json``: the counts, every difference and every decision not rebuilt."""
    return {
        "replayed": report.replayed, "identical": report.identical, "differ": report.differ,
        "start_version": report.start_version,
        "differences": [{"request_id": d.request_id, "event_id": d.event_id,
                         "cluster_version": d.cluster_version, "recorded_digest": d.recorded_digest,
                         "replayed_digest": d.replayed_digest, "diff": d.diff} for d in report.differences],
        "skipped": [{"event_id": event_id, "reason": reason} for event_id, reason in report.skipped],
    }


def acl_json(text: str) -> dict[str, Any]:
    """``gpusched acl -o json``: each ``user`` line of the ACL file as ``{user, enabled, hash, rules}``."""
    users = []
    for line in text.splitlines():
        words = line.split()
        if len(words) < 2 or words[0] != "user":
            continue
        hashes = [word[1:] for word in words[2:] if word.startswith("#")]
        flags = ("reset", "on", "off")
        rules = [word for word in words[2:] if not word.startswith("#") and word not in flags]
        users.append({"user": words[1], "enabled": "on" in words[2:],
                      "password_sha256": hashes[0] if hashes else None, "rules": rules})
    return {"users": users}


__all__ = ["CliError", "add_output_option", "duration_s", "output_format", "print_json", "render_listing"]
