"""Offline subcommands: ``gpusched schedule`` and ``gpusched tune`` (no Redis, no Celery)."""

from __future__ import annotations

import argparse
from typing import Any

from tasks.edges.cli_support import CliError, read_json
from tasks.edges.cli_views import add_output_option

__all__ = ["CliError", "read_json", "register"]


def _schedule(args: argparse.Namespace) -> int:
    request = read_json(args.file)  # unreadable input is reported before the core is loaded

    from scheduler_core import deciding, schedule

    with deciding():
        result = schedule(request)
    if args.output == "text":
        from tasks.edges.demo_offline import describe

        print("\n".join(describe(str(args.file), result)))
    else:
        print(result.model_dump_json(indent=2 if args.pretty else None))
    if result.status == "rejected" and result.error is not None:
        where = f"{result.error.field}: " if result.error.field else ""
        raise CliError(f"rejected: {where}{result.error.message}")
    return 0


def tune_error(error: ValueError) -> str:
    """One line for a refused tune request: the first invalid field and why, or the tuner's own text."""
    from pydantic import ValidationError

    if isinstance(error, ValidationError):
        first = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "request"
        return f"invalid tune request: {where}: {first['msg']}"
    lines = str(error).strip().splitlines()
    return f"invalid tune request: {lines[0] if lines else type(error).__name__}"


def _tune(args: argparse.Namespace) -> int:
    request = read_json(args.file)

    from scheduler_core import tune

    try:
        result = tune(request)
    except ValueError as error:
        raise CliError(tune_error(error)) from None
    print(result.model_dump_json(indent=2 if args.pretty else None))
    return 0


def register(commands: Any) -> None:
    """Add ``schedule`` and ``tune`` to the ``gpusched`` subcommands."""
    schedule = commands.add_parser(
        "schedule", help="decide a placement for REQUEST.json in process (Contract 1)",
        description="Decide a placement in process, without Redis or workers; the request carries "
                    "its own workers and model_instances. Exit 0 scheduled or unschedulable, "
                    "2 rejected or unreadable input.",
    )
    schedule.add_argument("file", metavar="REQUEST.json", help="request file, or - for stdin")
    schedule.add_argument("--pretty", action="store_true", help="indent the JSON output")
    add_output_option(schedule, "json")  # Contract 1: the result JSON
    schedule.set_defaults(handler=_schedule)
    tune = commands.add_parser(
        "tune", help="plan diffusion launch flags for FILE.json (Contract 2)",
        description="Plan SGLang diffusion launch flags for one deployment (e.g. "
                    "examples/tune/qwen-image.json). Exit 0 planned, 2 invalid request.",
    )
    tune.add_argument("file", metavar="FILE.json", help="tune request file, or - for stdin")
    tune.add_argument("--pretty", action="store_true", help="indent the JSON output")
    tune.set_defaults(handler=_tune)
