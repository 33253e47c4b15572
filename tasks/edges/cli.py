"""The ``gpusched`` command line.

Subcommands are registered by small modules so offline commands never import
Celery or Redis: ``schedule``/``tune`` run in process on embedded defaults;
the service commands (``submit``, ``worker``, ``cluster``, ``replay``) live in
:mod:`tasks.edges.cli_service`, the operator's (``cancel``, ``describe``,
``cluster show``, ``health``, ``list``) in :mod:`tasks.edges.cli_operate`,
``console`` in :mod:`tasks.edges.cli_console`; how each prints (``-o
text|json``) is :mod:`tasks.edges.cli_views`.

Every command (and ``--version``) reads the settings first, so a typo in
``GPUSCHED_*`` stops it with one line, whether or not it uses the settings.

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

from tasks.edges import cli_console, cli_offline, cli_operate, cli_service
from tasks.edges.cli_support import EXIT_BAD_INPUT, EXIT_FAILURE, CliError, Parser, error_line, one_line
from tasks.edges.gpustack_bridge import cli as cli_gpustack


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpusched")
    except PackageNotFoundError:  # a source tree that is not installed
        return "unknown (not installed)"


def check_settings() -> None:
    """Read the settings once, so a typo in ``GPUSCHED_*`` (or ``service.json``) stops every command.

    The offline commands and ``--version`` use no setting, but a misspelt
    variable is still a mistake the operator should hear about before it
    matters (docs/service.md, *Settings*). Loads pydantic-settings only, never
    Celery or Redis.

    Raises:
        tasks.base.settings.SettingsError: one line naming the setting (exit 2).
    """
    from tasks.base.settings import get_settings

    get_settings()


class _Version(argparse.Action):
    """``--version``: check the settings (as every command does), then print the version and exit."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print the installed version and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        check_settings()
        print(f"gpusched {_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The full ``gpusched`` parser with every registered subcommand."""
    parser = Parser(prog="gpusched", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    cli_offline.register(commands)
    # both import Celery/Redis lazily, inside their handlers
    cli_service.register(commands, cluster_actions=cli_operate.register_cluster)
    cli_operate.register(commands)  # cancel, describe, health, list (cluster show: under cluster)
    cli_console.register(commands)  # console (Starlette/uvicorn imported when it runs)
    cli_gpustack.register(commands)  # gpustack, gpustack report
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
    """A :class:`tasks.base.settings.SettingsError` (only possible once that module is loaded)."""
    settings = sys.modules.get("tasks.base.settings")
    return settings is not None and isinstance(error, settings.SettingsError)


def _run(argv: Sequence[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
        check_settings()
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
