"""The ``gpusched`` command line.

Subcommands are registered by small modules so offline commands never import
Celery or Redis: ``schedule``/``tune`` run in process on embedded defaults;
the service commands (``submit``, ``worker``, ``cluster``, ``replay``) live in
:mod:`tasks.edges.cli_service`, the operator's (``cancel``, ``describe``,
``cluster show``, ``health``) in :mod:`tasks.edges.cli_operate`.

Exit codes: 0 success (including ``unschedulable``); 2 bad input, a rejected
request, invalid settings or bad usage; 1 a service failure (Redis unreachable,
a timeout, no live worker, replay differences) or standard output closed
before the output was written. Every failure is one line on stderr, with the
Redis password masked; never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from tasks.edges import cli_offline, cli_operate, cli_service
from tasks.edges.cli_support import EXIT_BAD_INPUT, EXIT_FAILURE, CliError, Parser, error_line, one_line


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpusched")
    except PackageNotFoundError:  # a source tree that is not installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The full ``gpusched`` parser with every registered subcommand."""
    parser = Parser(prog="gpusched", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--version", action="version", version=f"gpusched {_version()}",
                        help="print the installed version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    cli_offline.register(commands)
    # both import Celery/Redis lazily, inside their handlers
    cli_service.register(commands, cluster_actions=cli_operate.register_cluster)
    cli_operate.register(commands)  # cancel, describe, health (cluster show: under cluster)
    return parser


def _fail(message: str) -> None:
    """Write one line on stderr (if there is a stderr), secrets masked."""
    if sys.stderr is not None:
        try:
            print(f"gpusched: {one_line(message)}", file=sys.stderr, flush=True)
        except OSError:
            pass


def _silence_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so the interpreter's final flush is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _is_settings_error(error: Exception) -> bool:
    """A :class:`tasks.runtime.settings.SettingsError` (only possible once that module is loaded;
    the offline commands never load it)."""
    settings = sys.modules.get("tasks.runtime.settings")
    return settings is not None and isinstance(error, settings.SettingsError)


def _run(argv: Sequence[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
        code: int = args.handler(args)
        sys.stdout.flush()
    except CliError as error:
        _fail(str(error))
        return error.exit_code
    except Exception as error:
        if not _is_settings_error(error):
            raise
        _fail(str(error))
        return EXIT_BAD_INPUT
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    if sys.stdout is None:  # started with stdout closed: no output could be written
        _fail("standard output is closed")
        return EXIT_FAILURE
    try:
        return _run(argv)
    except BrokenPipeError:
        _silence_stdout()
        _fail("standard output was closed before the output was written")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # never a traceback: one line, and a non-zero exit
        _fail(f"unexpected error: {error_line(error)}")
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
