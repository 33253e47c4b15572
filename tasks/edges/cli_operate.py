"""Operator subcommands of ``gpusched``: ``cancel``, ``describe``, ``cluster show``, ``health``.

Like :mod:`tasks.edges.cli_service`, nothing here imports Celery or Redis at
import time. Exit codes: 0 success (``health``: healthy); 2 with one line on
stderr for an unknown request id; 1 for a service failure (Redis
unreachable) or, for ``health``, an unhealthy deployment or node (one line
saying why).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from tasks.edges.cli_offline import CliError
from tasks.edges.cli_service import preflight, service_client, service_errors
from tasks.edges.cli_support import EXIT_FAILURE, non_negative_int
from tasks.edges.cli_views import (
    add_output_option,
    duration_s,
    health_json,
    output_format,
    print_json,
    render_health,
    render_listing,
)

#: ``cluster show --sort`` orders (:func:`tasks.edges.cluster_view.sort_workers`); kept here so
#: building the parser imports nothing of the service.
WORKER_ORDERS = ("id", "name", "free", "booked", "state")


# -------------------------------------------------------------------- cancel
def _cancel(args: argparse.Namespace) -> int:
    from tasks.flows.cancels import UNKNOWN

    with service_errors():
        outcome = service_client().cancel(args.request_id)
    print(json.dumps(outcome, indent=2 if args.pretty else None))
    if outcome["status"] == UNKNOWN:
        raise CliError(f"no request {args.request_id!r} (unknown, or its record expired)")
    return 0


# ------------------------------------------------------------------ describe
def _describe(args: argparse.Namespace) -> int:
    from tasks.edges.describe import describe_request, render_description

    with service_errors():
        info = describe_request(service_client().rt, args.request_id)
    if info is None:
        raise CliError(f"no request {args.request_id!r} (unknown, or its record expired)")
    print(json.dumps(info, indent=2) if output_format(args) == "json" else render_description(info))
    return 0


# -------------------------------------------------------------- cluster show
def _cluster_show(args: argparse.Namespace) -> int:
    from tasks.edges.cluster_view import Filters, arrange, cluster_view, render_cluster

    filters = Filters(worker=args.worker, gpu_type=args.gpu_type, state=args.state, label=args.label)
    with service_errors():
        view = cluster_view(service_client().rt, filters, holders=args.holders)
    if output_format(args) == "json":
        print(json.dumps(arrange(view, args.sort, args.limit), indent=2))
    else:
        print(render_cluster(view, gpus=args.gpus, sort=args.sort, limit=args.limit, holders=args.holders))
    return 0


# ---------------------------------------------------------------------- list
def _list(args: argparse.Namespace) -> int:
    from tasks.edges.request_list import ListQuery, list_requests

    with service_errors():
        rt = service_client().rt
        since = rt.partition.now_ms() - args.since * 1000 if args.since else None
        query = ListQuery(state=args.state, reason=args.reason, search=args.search, since_ms=since,
                          limit=args.limit)
        listing = list_requests(rt, query)
    if output_format(args) == "json":
        print_json(listing, args.pretty)
    else:
        print(render_listing(listing))
    return 0


#: ``gpusched list --state`` values (:data:`tasks.edges.request_list.STATES`; kept here so building
#: the parser imports nothing of the service).
LIST_STATES = ("queued", "deciding", "parked", "placed", "released", "moved", "rejected", "cancelled",
               "expired")


# -------------------------------------------------------------------- health
def _health(args: argparse.Namespace) -> int:
    if args.endpoint:
        return _endpoint_health(args.endpoint, args.timeout)
    import redis

    from tasks.runtime.health import DEPLOYMENT_CHECKS, first_failure, run_checks

    try:  # bounded like every command's first PING: a TLS handshake that never ends is a timeout
        preflight()
    except CliError as error:
        if error.exit_code != EXIT_FAILURE:
            raise
        raise CliError(f"unhealthy: {error}", EXIT_FAILURE) from None
    except redis.RedisError:
        pass  # refused, or a password missing: the checks report Redis themselves
    rt = service_client(check=False, intact=False).rt
    verdicts = run_checks(rt, DEPLOYMENT_CHECKS)
    failed = first_failure(verdicts)
    notes = rescheduling_notes(rt) if failed is None or failed.name != "redis" else {}
    if output_format(args) == "json":
        print_json(health_json(verdicts, failed is None, notes))
    if failed is not None:
        raise CliError(f"unhealthy: {failed.detail}", 1)
    if output_format(args) == "text":
        print(render_health(verdicts))
        if notes.get("rescheduling", {}).get("suspended"):
            from tasks.edges.cluster_view import suspension_line

            print(f"warning: {suspension_line(notes['rescheduling'])}")
    return 0


def rescheduling_notes(rt: Any) -> dict[str, Any]:
    """``{"rescheduling": {...}}``: whether the mass-outage guard suspended rescheduling (a warning,
    not a failure: the service still decides; placements on lost workers wait)."""
    import redis

    from tasks.edges.cluster_view import rescheduling_state

    try:
        return {"rescheduling": rescheduling_state(rt.client.get(rt.keys.reschedule_suspended))}
    except redis.RedisError:
        return {}


def _endpoint_health(url: str, timeout: float) -> int:
    """One worker node's ``/healthz``: 200 is healthy; anything else names its first failing check."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            body = json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as error:
        body = json.loads(error.read() or b"{}") if error.code == 503 else {}
        failed = next((c for c in body.get("checks") or [] if not c.get("ok")), None)
        why = failed["detail"] if failed else f"HTTP {error.code}"
        raise CliError(f"unhealthy: {why}", 1) from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise CliError(f"unhealthy: cannot reach {url} ({error})", 1) from None
    checks = body.get("checks") or []
    print("healthy: " + "; ".join(f"{c.get('name')} {c.get('detail')}" for c in checks))
    return 0


def register(commands: Any) -> None:
    """Add ``cancel``, ``describe``, ``health`` and ``list`` to the ``gpusched`` subparsers."""
    cancel = commands.add_parser(
        "cancel", help="withdraw a request (queued, parked, retrying or in flight; releases a placement)"
    )
    cancel.set_defaults(handler=_cancel)
    cancel.add_argument("request_id", metavar="REQUEST_ID", help="the request to withdraw")
    cancel.add_argument("--pretty", action="store_true", help="indent the JSON output")

    describe = commands.add_parser(
        "describe", help="a request's status, placement per GPU, why-not funnel and event timeline"
    )
    describe.set_defaults(handler=_describe)
    describe.add_argument("request_id", metavar="REQUEST_ID", help="the request to describe")
    describe.add_argument("--json", action="store_true", help="print JSON instead of text (= -o json)")
    add_output_option(describe, "text")

    health = commands.add_parser(
        "health", help="exit 0 when healthy, 1 with one line saying why not (Redis, worker nodes, drainers)"
    )
    health.set_defaults(handler=_health)
    health.add_argument("--endpoint", default=None, metavar="URL",
                        help="check one worker node's /healthz instead (e.g. http://127.0.0.1:9464/healthz)")
    health.add_argument("--timeout", type=float, default=5.0, metavar="S",
                        help="seconds to wait for --endpoint (5)")
    add_output_option(health, "text")

    listing = commands.add_parser(
        "list", help="list requests by state (queued, deciding, parked, placed, moved, rejected, ...)",
        description="List requests by state, newest first, with their age: in flight (queued, deciding), "
                    "parked (with the reasons they wait for) and finished (placed, released, moved, "
                    "rejected, cancelled, expired: read from the results stream, newest first). Exit 0, "
                    "1 Redis unreachable, 2 bad usage.",
    )
    listing.set_defaults(handler=_list)
    listing.add_argument("--state", choices=LIST_STATES, default=None, metavar="STATE",
                         help=", ".join(LIST_STATES))
    listing.add_argument("--reason", default=None, metavar="REASON",
                         help="only parked requests waiting for this reason code (insufficient_vram, ...)")
    listing.add_argument("--since", type=duration_s, default=None, metavar="DURATION",
                         help="only requests updated within DURATION (90s, 15m, 1h, 2d)")
    listing.add_argument("--search", default=None, metavar="TEXT", help="only request ids containing TEXT")
    listing.add_argument("--limit", type=non_negative_int, default=200, metavar="N",
                         help="most rows (default 200; the counts cover every request read)")
    listing.add_argument("--json", action="store_true", help="print JSON instead of text (= -o json)")
    add_output_option(listing, "text")
    listing.add_argument("--pretty", action="store_true", help="with JSON: indent it")


def register_cluster(actions: Any) -> None:
    """Add ``cluster show`` to the ``gpusched cluster`` subparsers."""
    show = actions.add_parser(
        "show", help="workers and GPUs (total, allocatable, booked, free GiB) and the parked queue"
    )
    show.set_defaults(handler=_cluster_show)
    show.add_argument("--worker", default=None, metavar="ID|NAME|PATTERN",
                      help="only this worker: its id, its name or a shell pattern on names (node-00*)")
    show.add_argument("--gpu-type", default=None, metavar="TYPE",
                      help="only GPUs whose type (cuda, rocm, ...) or name (H100, ...) contains TYPE")
    show.add_argument("--state", default=None, metavar="STATE",
                      help="only workers in STATE (ready, not_ready, unreachable, ...; down = not ready)")
    show.add_argument("--sort", default="id", choices=WORKER_ORDERS,
                      help="worker order (free/booked: most first; state: not ready first)")
    show.add_argument("--limit", type=non_negative_int, default=None, metavar="N",
                      help="show the first N workers only (after --sort; the summary covers them all)")
    show.add_argument("--label", default=None, metavar="KEY[=VALUE]",
                      help="only workers with this label (key=value) or label key")
    show.add_argument("--gpus", action="store_true", help="one row per GPU under each worker")
    show.add_argument("--holders", action="store_true",
                      help="a row per GPU naming what holds it (request or instance, GiB), outside usage")
    show.add_argument("--json", action="store_true", help="print JSON instead of text (= -o json)")
    add_output_option(show, "text")
