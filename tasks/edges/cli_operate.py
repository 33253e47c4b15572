"""Operator subcommands of ``gpusched``: ``cancel``, ``describe``, ``cluster show``, ``health``.

Like :mod:`tasks.edges.cli_service`, nothing here imports Celery or Redis at
import time. Exit codes: 0 success; 2 with one line on stderr for an unknown
request id; 1 for a service failure (Redis unreachable) or, for ``health``,
an unhealthy deployment (one line saying why).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from tasks.edges.cli_offline import CliError
from tasks.edges.cli_service import service_client, service_errors


# -------------------------------------------------------------------- cancel
def _cancel(args: argparse.Namespace) -> int:
    from tasks.state.cancels import UNKNOWN

    with service_errors():
        outcome = service_client().cancel(args.request_id)
    print(json.dumps(outcome, indent=2 if args.pretty else None))
    if outcome["status"] == UNKNOWN:
        raise CliError(f"no request {args.request_id!r} (unknown, or its record expired)")
    return 0


def register(commands: Any) -> None:
    """Add ``cancel``, ``describe`` and ``health`` to the ``gpusched`` subparsers."""
    cancel = commands.add_parser(
        "cancel", help="withdraw a request (queued, parked, retrying or in flight; releases a placement)"
    )
    cancel.set_defaults(handler=_cancel)
    cancel.add_argument("request_id", metavar="REQUEST_ID", help="the request to withdraw")
    cancel.add_argument("--pretty", action="store_true", help="indent the JSON output")


def register_cluster(actions: Any) -> None:
    """Add ``cluster show`` to the ``gpusched cluster`` subparsers."""
