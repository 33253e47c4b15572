"""Offline subcommands: ``gpusched schedule`` and ``gpusched tune`` (no Redis, no Celery)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


class CliError(Exception):
    """A failure reported as one line on stderr with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def read_json(source: str) -> Any:
    """Read JSON from a file path or ``-`` (stdin).

    Raises:
        CliError: the file is missing/unreadable or not JSON (exit code 2).
    """
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as error:
        raise CliError(f"cannot read {source}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise CliError(f"cannot read {source}: not UTF-8 text") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        raise CliError(f"{source}: invalid JSON at {where}: {error.msg}") from None


def _schedule(args: argparse.Namespace) -> int:
    from scheduler_core import schedule

    result = schedule(read_json(args.file))
    print(result.model_dump_json(indent=2 if args.pretty else None))
    if result.status == "rejected" and result.error is not None:
        where = f"{result.error.field}: " if result.error.field else ""
        raise CliError(f"rejected: {where}{result.error.message}")
    return 0


def _tune(args: argparse.Namespace) -> int:
    from scheduler_core import tune

    try:
        result = tune(read_json(args.file))
    except ValueError as error:
        raise CliError(f"invalid tune request: {str(error).splitlines()[0]}") from None
    print(result.model_dump_json(indent=2 if args.pretty else None))
    return 0


def register(commands: Any) -> None:
    """Add ``schedule`` and ``tune`` to the ``gpusched`` subcommands."""
    schedule = commands.add_parser(
        "schedule", help="decide a placement for REQUEST.json in process (Contract 1)"
    )
    schedule.add_argument("file", metavar="REQUEST.json", help="request file, or - for stdin")
    schedule.add_argument("--pretty", action="store_true", help="indent the JSON output")
    schedule.set_defaults(handler=_schedule)
    tune = commands.add_parser("tune", help="plan diffusion launch flags for FILE.json (Contract 2)")
    tune.add_argument("file", metavar="FILE.json", help="tune request file, or - for stdin")
    tune.add_argument("--pretty", action="store_true", help="indent the JSON output")
    tune.set_defaults(handler=_tune)
