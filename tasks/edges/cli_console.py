"""``gpusched console [--host H] [--port P]``: serve the read-only web console (uvicorn).

Nothing here imports Starlette, uvicorn or Redis at import time.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from typing import Any

from tasks.edges.cli_support import CliError

#: Where the console listens by default (loopback: put it behind your own proxy or pass --host).
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9465


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a port number") from None
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} must be a port from 1 to 65535")
    return value


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _console(args: argparse.Namespace) -> int:
    import uvicorn

    from tasks.base.logging import configure_logging
    from tasks.base.settings import get_settings
    from tasks.edges.cli_service import preflight, service_errors
    from tasks.edges.console.app import create_app

    settings = get_settings()
    configure_logging(settings.log_format, settings.log_level)
    with service_errors():
        preflight()
        app = create_app(settings)
    if settings.console_basic_auth is None and not _loopback(args.host):
        print(f"gpusched: warning: the console on {args.host} has no authentication "
              "(set GPUSCHED_CONSOLE_BASIC_AUTH=user:password)", file=sys.stderr)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", access_log=False,
                            proxy_headers=False, server_header=False, timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    try:
        server.run()
    except SystemExit as stop:  # uvicorn exits 1 when it cannot bind
        raise CliError(f"cannot serve the console on {args.host}:{args.port}", 1) from stop
    return 0


def register(commands: Any) -> None:
    """Add ``console`` to the ``gpusched`` subcommands."""
    console = commands.add_parser(
        "console", help="serve the read-only web console (cluster map, requests, live feed, health)",
        description="Serve the read-only web console for this partition: the cluster map (every worker "
                    "and GPU, who holds it), requests by state, one request, the live feed and health. "
                    "Use the read-only Redis user gpusched-console; set GPUSCHED_CONSOLE_BASIC_AUTH to "
                    "require HTTP basic auth. Exit 0 on shutdown, 1 Redis unreachable or the port taken.",
    )
    console.set_defaults(handler=_console)
    console.add_argument("--host", default=DEFAULT_HOST, metavar="H",
                         help=f"address to listen on (default {DEFAULT_HOST})")
    console.add_argument("--port", type=_port, default=DEFAULT_PORT, metavar="P",
                         help=f"port to listen on (default {DEFAULT_PORT})")
