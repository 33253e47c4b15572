"""The ``gpusched`` command line.

Subcommands are registered by small modules so offline commands never import
Celery or Redis: ``schedule``/``tune`` run in process on embedded defaults;
the service commands (``submit``, ``worker``, ``cluster``, ``replay``) live in
:mod:`tasks.edges.cli_service`.

Exit codes: 0 success (including ``unschedulable``), 2 bad input or a
rejected request (one line on stderr), 1 a service failure.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tasks.edges import cli_offline, cli_operate, cli_service


def build_parser() -> argparse.ArgumentParser:
    """The full ``gpusched`` parser with every registered subcommand."""
    parser = argparse.ArgumentParser(prog="gpusched", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    cli_offline.register(commands)
    # both import Celery/Redis lazily, inside their handlers
    cli_service.register(commands, cluster_actions=cli_operate.register_cluster)
    cli_operate.register(commands)  # cancel, describe, health (cluster show: under cluster)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except cli_offline.CliError as error:
        print(f"gpusched: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
