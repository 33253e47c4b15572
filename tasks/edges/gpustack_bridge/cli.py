"""``gpusched gpustack``: run the bridge; ``gpusched gpustack report``: shadow mode's agreement.

    gpusched gpustack --server URL --cluster-id N --mode place|shadow
    gpusched gpustack report [--cluster-id N] [--limit K] [--json]

The API key comes from the setting ``gpustack_api_key`` (``GPUSCHED_GPUSTACK_API_KEY``),
never from the command line, and is never printed; ``https://`` servers are verified
(``gpustack_ca_file`` names another CA bundle). Building the parser imports nothing of
the service. Exit codes: 0 stopped by SIGTERM/SIGINT (or the report printed); 2 bad usage,
or place mode against a GPUStack whose own scheduler runs; 1 Redis unreachable.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from tasks.edges.cli_support import EXIT_BAD_INPUT, CliError, positive_int

#: How long the bridge keeps asking a GPUStack that does not answer at start-up (it may be starting).
STARTUP_WAIT_S = 300.0


def _bridge_parts(args: argparse.Namespace) -> tuple[Any, Any]:
    from tasks.base.settings import get_settings
    from tasks.edges.cli_service import service_client
    from tasks.edges.gpustack_bridge.api import GpustackApi

    settings = get_settings()
    key = settings.gpustack_api_key.get_secret_value() if settings.gpustack_api_key else None
    try:
        api = GpustackApi(args.server, key, ca_file=settings.gpustack_ca_file)
    except (ValueError, OSError) as error:  # a bad URL, an unreadable CA file
        raise CliError(f"--server / gpustack_ca_file: {error}", EXIT_BAD_INPUT) from None
    return api, service_client()


def _wait_for_plugin(bridge: Any) -> None:
    from tasks.edges.gpustack_bridge.api import GpustackError
    from tasks.edges.gpustack_bridge.bridge import PluginMissing

    deadline = time.monotonic() + STARTUP_WAIT_S
    while True:
        try:
            bridge.check_plugin()
            return
        except PluginMissing as error:
            raise CliError(str(error), EXIT_BAD_INPUT) from None
        except GpustackError as error:
            if not error.retryable or time.monotonic() > deadline:
                raise CliError(f"cannot ask GPUStack at {bridge.api.base_url}: {error}", 1) from None
            time.sleep(2.0)


def _run(args: argparse.Namespace) -> int:
    if args.action == "report":
        return _report(args)
    missing = [
        flag
        for flag, value in (
            ("--server", args.server),
            ("--cluster-id", args.cluster_id),
            ("--mode", args.mode),
        )
        if value is None
    ]
    if missing:
        raise CliError(f"missing {', '.join(missing)} (see gpusched gpustack --help)", EXIT_BAD_INPUT)
    from tasks.edges.cli_service import service_errors
    from tasks.edges.gpustack_bridge import metrics
    from tasks.edges.gpustack_bridge.bridge import Bridge

    with service_errors():
        api, client = _bridge_parts(args)
        bridge = Bridge(api, client, client.settings, args.cluster_id, args.mode)
        bridge.install_signals()
        _wait_for_plugin(bridge)
        metrics.serve(client.settings.gpustack_metrics_port, client.settings.metrics_host)
        bridge.run()
    return 0


def _report(args: argparse.Namespace) -> int:
    from tasks.edges.cli_service import service_client, service_errors
    from tasks.edges.gpustack_bridge.keys import BridgeKeys
    from tasks.edges.gpustack_bridge.shadow import report

    with service_errors():
        client = service_client()
        cluster_ids = [args.cluster_id] if args.cluster_id else _shadowed_clusters(client)
        reports = [report(client.rt.client, BridgeKeys(client.rt.keys, c), args.limit) for c in cluster_ids]
    if args.json:
        print(json.dumps(reports, indent=2, sort_keys=True))
        return 0
    if not reports:
        print("no shadow decisions recorded (run gpusched gpustack --mode shadow)")
    for item in reports:
        agreeing = item["agree"] + item["tie"]
        share = f"{100 * agreeing / item['decisions']:.1f} %" if item["decisions"] else "-"
        print(
            f"GPUStack cluster {item['cluster_id']}: {item['decisions']} decisions compared: "
            f"{agreeing} agree ({share}; {item['agree']} identical, {item['tie']} another of GPUStack's "
            f"equally scored candidates), {item['differ']} differ, {item['skipped']} skipped"
            + (f"; {item['reread']} of the agreeing after reading GPUStack's workers again (the bridge's"
               " mirror was behind)" if item.get("reread") else "")
        )
        for diff in item["differences"]:
            print(
                f"  {diff['verdict']}: instance {diff['instance_id']} ({diff['instance']}): "
                f"{', '.join(diff['fields'])}"
            )
            print(f"    GPUStack: {json.dumps(diff['gpustack'], sort_keys=True)}")
            print(f"    gpusched: {json.dumps(diff['gpusched'], sort_keys=True)}")
    return 0


def _shadowed_clusters(client: Any) -> list[int]:
    prefix = f"{client.rt.keys.prefix}:gpustack:"
    found = set()
    for key in client.rt.client.scan_iter(match=f"{prefix}*:shadow:counts", count=1000):
        middle = str(key)[len(prefix) :].split(":", 1)[0]
        if middle.isdigit():
            found.add(int(middle))
    return sorted(found)


def register(commands: Any) -> None:
    """Add ``gpustack`` (and ``gpustack report``) to the ``gpusched`` subparsers."""
    bridge = commands.add_parser(
        "gpustack",
        help="run the bridge to a GPUStack server (place or shadow mode); 'report': shadow's agreement",
    )
    bridge.set_defaults(handler=_run)
    bridge.add_argument(
        "action",
        nargs="?",
        choices=("report",),
        default=None,
        help="report: print shadow mode's agreement instead of running the bridge",
    )
    bridge.add_argument("--server", metavar="URL", help="GPUStack's API, e.g. https://gpustack.example:443")
    bridge.add_argument("--cluster-id", type=positive_int, metavar="N", help="the GPUStack cluster to follow")
    bridge.add_argument(
        "--mode",
        choices=("place", "shadow"),
        help="place: gpusched places (GPUStack's scheduler off); shadow: compare, never write",
    )
    bridge.add_argument(
        "--limit",
        type=positive_int,
        default=10,
        metavar="K",
        help="report: show the K latest differences (10)",
    )
    bridge.add_argument("--json", action="store_true", help="report: print JSON")
