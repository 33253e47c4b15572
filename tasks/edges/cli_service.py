"""Service subcommands of ``gpusched``: ``submit``, ``worker``, ``cluster apply|event``, ``replay``.

Nothing here imports Celery or Redis at module import time (the offline
commands must work without them); handlers import lazily. One-line errors are
raised as :class:`tasks.edges.cli_support.CliError`: exit 2 for bad input (or a
rejected request, or invalid settings), 1 for a service failure (Redis
unreachable, refusing or out of memory, its data lost and not recovered,
a write no replica acknowledged in time, timeout, no live worker, replay
differences or decisions replay could not rebuild). The Redis URL is always
shown with its password masked (through Sentinel: the master's name and the
Sentinels).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tasks.edges.cli_support import (
    EXIT_FAILURE,
    CliError,
    positive_int,
    positive_seconds,
    read_json,
    read_json_documents,
    redis_location,
    stream_id,
)
from tasks.edges.cli_views import acl_json, add_output_option, output_format, print_json, replay_json


@contextmanager
def _service_errors() -> Iterator[None]:
    """Turn Redis/broker failures into a one-line exit-1 error (the URL's password masked)."""
    import redis
    from kombu.exceptions import OperationalError

    from tasks.base.settings import get_settings
    from tasks.state.generation import DataLost
    from tasks.state.outages import RedisOutOfMemory
    from tasks.state.replication import NotReplicated

    try:
        yield
    except DataLost as error:
        raise CliError(str(error), EXIT_FAILURE) from None
    except NotReplicated as error:  # before ConnectionError, its base: Redis answered
        raise CliError(f"not acknowledged: {error}", EXIT_FAILURE) from None
    except (redis.exceptions.OutOfMemoryError, redis.exceptions.ExecAbortError, OperationalError) as error:
        oom = _out_of_memory(error)
        if oom is None and isinstance(error, redis.exceptions.ExecAbortError):
            raise  # a transaction discarded for another reason: not an outage
        if oom is None:  # kombu's error for a broker it cannot reach
            where = redis_location(get_settings())
            raise CliError(f"cannot reach {where}: {error}", EXIT_FAILURE) from None
        message = str(oom) if isinstance(oom, RedisOutOfMemory) else f"Redis is out of memory: {oom}"
        raise CliError(message, EXIT_FAILURE) from None
    except (redis.ConnectionError, redis.TimeoutError, ConnectionError) as error:
        where = redis_location(get_settings())
        raise CliError(f"cannot reach {where}: {error}", EXIT_FAILURE) from None
    except redis.RedisError as error:  # e.g. NOPERM, OOM: Redis answered and refused
        where = redis_location(get_settings())
        raise CliError(f"{where} refused the command: {error}{_permission_hint(error)}",
                       EXIT_FAILURE) from None


def _permission_hint(error: Exception) -> str:
    """What to do when the ACL user may not run the service's scripts (the submitter's user)."""
    import redis

    from tasks.base.settings import get_settings

    if not isinstance(error, redis.exceptions.NoPermissionError):
        return ""
    if "evalsha" in str(error).lower() or "script" in str(error).lower():
        if get_settings().submit_via != "queue":
            return (" (this Redis user may not run gpusched's scripts: a submitter's user, gpusched-submit, "
                    "submits with GPUSCHED_SUBMIT_VIA=queue; changing the cluster or cancelling needs "
                    "gpusched-control)")
        return " (this Redis user may not run gpusched's scripts: that needs gpusched-control)"
    return ""


def _out_of_memory(error: BaseException) -> BaseException | None:
    """Redis's out-of-memory refusal behind ``error``: itself, or the cause kombu wrapped in its
    ``OperationalError`` when a send (``cluster event``) was refused; None if there is none."""
    from tasks.state.outages import is_out_of_memory

    seen: BaseException | None = error
    for _ in range(8):  # a short chain: kombu wraps once
        if seen is None or is_out_of_memory(seen):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _preflight() -> None:
    """PING Redis once with the connect timeout for the whole exchange and no retry, so an
    unreachable server, a TLS mismatch (``rediss://`` to a plain server never finishes its
    handshake) or a missing password fails within ``redis_socket_connect_timeout_s``."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from tasks.base.settings import get_settings
    from tasks.state.context import redis_credentials
    from tasks.state.sentinel import master_client

    settings = get_settings()
    timeout = settings.redis_socket_connect_timeout_s
    connection: dict[str, Any] = {"socket_connect_timeout": timeout, "socket_timeout": timeout,
                                  "retry": Retry(NoBackoff(), 0), "protocol": 2}
    try:
        if settings.redis_sentinels:  # ask the Sentinels, then PING the master they name
            probe = master_client(settings, **connection)
        else:
            probe = redis.Redis.from_url(settings.redis_url, **connection, **redis_credentials(settings))
    except ValueError as error:
        raise CliError(f"invalid setting redis_url: {error}") from None
    try:
        probe.ping()
    except redis.TimeoutError as error:
        raise CliError(f"cannot reach {redis_location(settings)}: {error} (redis_socket_connect_timeout_s = "
                       f"{timeout:g})", EXIT_FAILURE) from None
    finally:
        probe.close()


def _client(check: bool = True, intact: bool = True) -> Any:
    """A client for the configured deployment, after a quick check that its Redis answers.

    Args:
        check: PING first (:func:`_preflight`); ``gpusched health`` reports an
            unreachable Redis itself and skips it.
        intact: refuse (DataLost, exit 1) while a data loss is detected and not
            recovered, so no command reads the wiped state as the cluster (an empty
            ``cluster export`` must not replace the last good backup); the recovery's
            own ``cluster apply --recover`` and ``health`` skip it.

    Raises:
        tasks.base.settings.SettingsError: invalid settings (one line; exit 2).
        CliError / redis.RedisError: Redis unreachable or refusing (exit 1 under
            :func:`_service_errors`).
        tasks.state.generation.DataLost: ``intact`` and a data loss is not recovered
            (exit 1 under :func:`_service_errors`).
    """
    from tasks.base.logging import configure_logging
    from tasks.base.settings import get_settings
    from tasks.edges.client import ServiceClient

    settings = get_settings()
    # the service's log lines (a recovery's data_recovered, export's booking_not_exported...)
    # go to stderr: stdout holds the command's JSON only
    configure_logging(settings.log_format, settings.log_level)
    if check:
        _preflight()
    client = ServiceClient()
    if intact:
        client.rt.generation.ensure_ok(create=False)
    return client


def _print(value: Any, pretty: bool) -> None:
    print(json.dumps(value, indent=2 if pretty else None, sort_keys=False))


# -------------------------------------------------------------------- submit
def _submit(args: argparse.Namespace) -> int:
    # bad input is reported before the service is contacted
    requests = [request for source in args.file for request in read_json_documents(source)]
    rejected: list[str] = []
    text = output_format(args) == "text"
    with _service_errors():
        client = _client()
        for value, since in _submitted(client, requests, args):
            _print_submitted(value, since, text, args.pretty)
            rejected.extend(_rejection_line(value))
            rejected.extend(_conflict_line(value))
    if rejected:
        raise CliError("rejected: " + "; ".join(rejected))
    return 0


def _submitted(
    client: Any, requests: list[Any], args: argparse.Namespace
) -> Iterator[tuple[dict[str, Any], str | None]]:
    """Each request's submission (or, with ``--wait``, its result) and what changed since.

    One request is submitted as ``submit`` does; several as one batch
    (``ServiceClient.submit_many``), then each awaited in order.
    """
    from tasks.edges.client import Submission, WaitTimeout

    start = client.last_result_id() if args.wait and len(requests) > 1 else "0-0"
    outcomes: list[Any] = client.submit_many(requests) if len(requests) > 1 else [None]
    for request, outcome in zip(requests, outcomes, strict=True):
        try:
            if outcome is None:
                outcome = client.submit(request, wait=args.wait, timeout=args.timeout, terminal=args.terminal)
            elif args.wait and outcome.result is None and outcome.status != "conflict":
                outcome = client.wait(outcome.request_id, timeout=args.timeout, start_id=start,
                                      terminal=args.terminal)
        except WaitTimeout as error:  # also NoLiveWorker: no worker heartbeat after a grace
            raise CliError(str(error), EXIT_FAILURE) from None
        if isinstance(outcome, Submission):
            yield (outcome.result if args.wait and outcome.result is not None else outcome.to_dict()), None
        else:
            yield outcome, _since_placed(client, outcome)


def _since_placed(client: Any, result: dict[str, Any]) -> str | None:
    """For a ``scheduled`` result whose placement no longer holds (released, or moved since): why.

    ``submit --wait`` of a known request returns its published result, which
    says ``scheduled`` long after the booking was released or moved.
    """
    if result.get("status") != "scheduled" or not result.get("request_id"):
        return None
    from tasks.edges.request_list import category

    record = client.rt.records.record(str(result["request_id"]))
    state = category(record)
    if state == "moved":
        return f"its placement was moved since, to {record.get('moved_to')}: this result holds no GPUs"
    if state == "released":
        return "its placement was released since (cancelled or deleted): this result holds no GPUs"
    return None


def _print_submitted(value: dict[str, Any], since: str | None, text: bool, pretty: bool) -> None:
    import sys

    if text:
        from tasks.edges.demo_service import describe_result

        line = describe_result(value) if "candidates" in value or "error" in value else (
            f"  {value.get('request_id')} {value.get('status')}")
        print(line + (f"\n  note: {since}" if since else ""))
    else:
        _print(value, pretty)
        if since:
            print(f"gpusched: note: {value.get('request_id')}: {since}", file=sys.stderr)


def _conflict_line(value: dict[str, Any]) -> list[str]:
    if value.get("status") != "conflict":
        return []
    return [f"{value.get('request_id')}: request_id already holds a different request "
            f"(stored digest {value.get('stored_digest')}, submitted {value.get('digest')})"]


def _rejection_line(value: dict[str, Any]) -> list[str]:
    result = value.get("result") if value.get("status") == "rejected" and "result" in value else value
    if not isinstance(result, dict) or result.get("status") != "rejected":
        return []
    error = result.get("error") or {}
    where = f"{error['field']}: " if error.get("field") else ""
    return [f"{result.get('request_id')}: {where}{error.get('message', '')}"]


# -------------------------------------------------------------------- worker
def _worker(args: argparse.Namespace) -> int:
    from tasks.base.keys import Keys
    from tasks.base.settings import get_settings
    from tasks.runtime.celery_app import app
    from tasks.runtime.preflight import check_configuration

    settings = get_settings()
    check_configuration(settings)  # a broken chain.json: one line, exit 2, nothing started
    queues = args.queues or ",".join(Keys(settings.cluster).queues)
    argv = [
        "worker",
        "--queues", queues,
        "--pool", args.pool,
        "--concurrency", str(args.concurrency or settings.worker_concurrency),
        "--loglevel", args.loglevel or settings.log_level,
    ]
    if args.hostname:
        argv += ["--hostname", args.hostname]
    if args.events:
        argv.append("--task-events")
    if not args.gossip:
        argv += ["--without-gossip", "--without-mingle"]
    app.worker_main(argv=argv + list(args.celery_args))
    return 0


# ------------------------------------------------------------------- cluster
def _invalid_input(error: Exception) -> CliError:
    from pydantic import ValidationError

    if isinstance(error, ValidationError):
        first = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        return CliError(f"invalid cluster snapshot: {where}: {first['msg']}")
    return CliError(f"invalid cluster snapshot: {error}")


def _cluster_apply(args: argparse.Namespace) -> int:
    document = read_json(args.file)
    if not isinstance(document, dict):
        raise CliError("invalid cluster snapshot: expected an object with workers and model_instances")
    with _service_errors():
        client = _client(intact=not args.recover)  # a recovery runs while the loss is marked
        if args.recover and not args.force:
            _refuse_needless_recovery(client)
        try:
            summary = client.apply_cluster(document, recover=args.recover, allow_removal=args.allow_removal,
                                           dry_run=args.dry_run)
        except ValueError as error:  # pydantic.ValidationError is a ValueError
            raise _invalid_input(error) from None
    _print(summary, args.pretty)
    return 0


def _refuse_needless_recovery(client: Any) -> None:
    """``--recover`` on a Redis that holds its data generation and no loss marker would supersede the
    live generation (every worker pauses and adopts the new one) for nothing: refuse without ``--force``.

    A Redis with a loss marker (a detected wipe or rollback) or with no generation at all (wiped
    before any process noticed) is what ``--recover`` is for.
    """
    from tasks.state.generation import generation_id

    k = client.rt.keys
    marker, generation = client.rt.client.mget([k.data_lost, k.generation])
    live = generation_id(generation)
    if marker or live is None:
        return
    raise CliError(f"Redis holds the live data generation {live} and no data loss was detected: "
                   "--recover would supersede it and pause every worker for nothing; run "
                   "'gpusched health' to see why you think data was lost, or pass --force to recover anyway")


#: Environment variable holding the password of each ACL role (``gpusched acl``).
ACL_PASSWORD_ENV = {"service": "REDIS_SERVICE_PASSWORD", "control": "REDIS_CONTROL_PASSWORD",
                    "submit": "REDIS_SUBMIT_PASSWORD", "console": "REDIS_CONSOLE_PASSWORD"}


def acl_password_variable(role: str, cluster: str | None, several: bool) -> str:
    """The environment variable holding ``role``'s password: ``REDIS_<ROLE>_PASSWORD``, and with
    several partitions ``REDIS_<ROLE>_PASSWORD_<CLUSTER>`` (upper case, ``.``/``-`` as ``_``)."""
    name = ACL_PASSWORD_ENV[role]
    if not several or cluster is None:
        return name
    return f"{name}_{cluster.upper().replace('.', '_').replace('-', '_')}"


def _acl_partitions(clusters: list[str | None]) -> list[tuple[dict[str, str], Any]]:
    import os

    from tasks.base.keys import Keys
    from tasks.runtime.acl import OPTIONAL_ROLES

    several = len(clusters) > 1
    partitions = []
    for cluster in clusters:
        variables = {role: acl_password_variable(role, cluster, several) for role in ACL_PASSWORD_ENV}
        variables = {role: name for role, name in variables.items()
                     if role not in OPTIONAL_ROLES or os.environ.get(name)}
        missing = [name for name in variables.values() if not os.environ.get(name)]
        if missing:
            raise CliError(f"set {', '.join(missing)} (the password of each Redis user)")
        partitions.append(({role: os.environ[name] for role, name in variables.items()}, Keys(cluster)))
    return partitions


def _acl(args: argparse.Namespace) -> int:
    import os

    from tasks.base.settings import CLUSTER_ID_PATTERN, get_settings
    from tasks.runtime.acl import acl_file

    clusters: list[str | None] = list(args.cluster or [get_settings().cluster])
    for cluster in clusters:
        if cluster is not None and not CLUSTER_ID_PATTERN.match(cluster):
            raise CliError(f"--cluster {cluster[:80]!r} must match {CLUSTER_ID_PATTERN.pattern}")
    if len(set(clusters)) != len(clusters):
        raise CliError("--cluster names a partition twice")
    first, *more = _acl_partitions(clusters)
    try:
        text = acl_file(*first, *more)
    except ValueError as error:  # one password for two users
        raise CliError(str(error)) from None
    if args.out is None:
        if output_format(args) == "json":
            print_json(acl_json(text), pretty=True)
        else:
            print(text, end="")
        return 0
    descriptor = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    with os.fdopen(descriptor, "w", encoding="utf-8") as out:
        out.write(text)
    return 0


def _cluster_export(args: argparse.Namespace) -> int:
    with _service_errors():
        document = _client().export_cluster()
    _print(document, args.pretty)
    return 0


def _cluster_event(args: argparse.Namespace) -> int:
    document = read_json(args.file)
    events = document if isinstance(document, list) else [document]
    with _service_errors():
        client = _client()
        for position, event in enumerate(events):  # every event is checked before any is sent
            problem = client.check_cluster_event(event)
            if problem is not None:
                where = f"events.{position}." if isinstance(document, list) else ""
                raise CliError(f"rejected cluster event: {where}{problem.field}: {problem.message}")
        failed: list[str] = []
        for event in events:
            summary = client.cluster_event(event, queue=not args.local)
            _print(summary, args.pretty)
            if summary.get("status") == "rejected":  # applied here (--local) and refused there
                failed.append(f"{summary.get('field') or 'event'}: {summary.get('error')}")
    if failed:
        raise CliError("rejected cluster event: " + "; ".join(failed))
    return 0


# -------------------------------------------------------------------- replay
def _replay(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from tasks.audit.archive import archive_files
    from tasks.decision.replay import ReplayError, format_report, replay

    def progress(phase: str, done: int) -> None:
        what = "events read" if phase == "read" else "decisions replayed"
        print(f"replay: {done} {what}", file=sys.stderr, flush=True)

    with _service_errors():
        client = _client()
        files = archive_files(Path(args.archive), client.rt.settings.cluster or "") if args.archive else []
        if args.archive and not files:
            raise CliError(f"no archive files in {args.archive}")
        until = _acknowledged_events(client)
        try:
            report = replay(client.rt.client, client.rt.cluster, request_id=args.request_id,
                            since=args.since, archive=files, progress=progress, until=until)
        except ReplayError as error:
            raise CliError(f"cannot replay: {error}", 1) from None
    if args.request_id and report.replayed == 0 and not report.skipped:
        raise CliError(f"nothing to replay: no decision of request {args.request_id} in the event log")
    if output_format(args) == "json":
        print_json(replay_json(report))
    else:
        print(format_report(report))
    if report.differ:
        raise CliError(f"{report.differ} decision(s) differ on replay", 1)
    if report.skipped:
        raise CliError(f"{len(report.skipped)} decision(s) could not be replayed", 1)
    return 0


def _acknowledged_events(client: Any) -> str | None:
    """How far replay reads the live log: with replicas required, what a replica acknowledged
    (after acknowledging everything written so far); None: all of it."""
    if not client.rt.replication.required:
        return None
    position = client.rt.replication.acknowledge() or client.rt.replication.position()
    return position.streams.get(client.rt.keys.events, "0-0") if position else "0-0"


# --------------------------------------------------------------------- audit
def _audit_checkpoint(args: argparse.Namespace) -> int:
    from tasks.audit.retention import checkpoint_now, scan

    with _service_errors():
        client = _client()
        scan(client.rt)
        version = checkpoint_now(client.rt)
    _print({"checkpoint": version}, args.pretty)
    return 0


def _audit_trim(args: argparse.Namespace) -> int:
    from tasks.audit.retention import scan, trim

    with _service_errors():
        client = _client()
        scan(client.rt)
        removed, deleted = trim(client.rt)
    _print({"trimmed": removed, "snapshots_deleted": deleted}, args.pretty)
    return 0


def _audit_export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tasks.audit.archive import entries_before, write_archive

    with _service_errors():
        client = _client()
        rt = client.rt
        before = args.before or _after_last(rt.client, rt.keys.events)
        try:
            written = write_archive(entries_before(rt.client, rt.keys.events, before), Path(args.folder),
                                    rt.settings.cluster or "")
        except OSError as error:
            if isinstance(error, ConnectionError):  # the socket, not the folder: a service failure
                raise
            raise CliError(f"cannot write to {args.folder}: {error.strerror or error}") from None
    _print({"file": str(written) if written else None}, args.pretty)
    return 0


def _after_last(client: Any, stream: str) -> str:
    last = client.xrevrange(stream, count=1)
    if not last:
        return "0-1"
    ms, _, seq = str(last[0][0]).partition("-")
    return f"{ms}-{int(seq) + 1}"


def _add(commands: Any, name: str, help_text: str, handler: Callable[[argparse.Namespace], int],
         description: str | None = None) -> Any:
    parser = commands.add_parser(name, help=help_text, description=description or help_text)
    parser.set_defaults(handler=handler)
    return parser


#: The one-line handling of Redis outages and of bad settings, for the other command modules.
service_errors = _service_errors
service_client = _client
preflight = _preflight


def register(commands: Any, cluster_actions: Callable[[Any], None] | None = None) -> None:
    """Add the service subcommands to the ``gpusched`` subparsers.

    Args:
        cluster_actions: adds more ``gpusched cluster`` actions to its subparsers.
    """
    submit = _add(commands, "submit", "put REQUEST.json on gpusched.requests (Contract 3)", _submit,
                  "Validate and record requests, and queue their decisions. Exit 0 accepted, "
                  "scheduled or unschedulable; 2 rejected or unreadable; 1 Redis unreachable, a "
                  "timeout, or no live worker while waiting.")
    submit.add_argument("file", metavar="FILE.json", nargs="+",
                        help="a request, a list of requests or JSON lines (one request per line); - for "
                        "stdin; several requests are submitted as one batch")
    submit.add_argument("--wait", action="store_true", help="print the result when it is published")
    submit.add_argument("--terminal", action="store_true",
                        help="with --wait: skip the 'unschedulable' notice, wait for the final result")
    submit.add_argument("--timeout", type=positive_seconds, default=30.0, metavar="S",
                        help="with --wait: seconds to wait for the result (default 30)")
    submit.add_argument("--pretty", action="store_true", help="indent the JSON output")
    add_output_option(submit, None)  # JSON for programs; the demo's block view on a terminal

    worker = _add(commands, "worker", "run a Celery worker (celery -A tasks.app worker)", _worker,
                  "Run a prefork Celery worker on the partition's three queues; options after the "
                  "known ones go to celery worker.")
    worker.add_argument("--concurrency", "-c", type=positive_int, default=None, metavar="N",
                        help="pool processes (default: the worker_concurrency setting)")
    worker.add_argument("--pool", default="prefork", choices=["prefork", "solo", "threads"],
                        help="Celery execution pool (default prefork)")
    worker.add_argument("--loglevel", "-l", default=None,
                        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL",
                                 "debug", "info", "warning", "error", "critical"],
                        help="log level (default: the log_level setting)")
    worker.add_argument("--hostname", "-n", default=None, metavar="NAME",
                        help="node name, e.g. w1@%%h (default: celery@<host>)")
    worker.add_argument("--queues", "-Q", default=None,
                        help="comma-separated queues (default: cluster, commits and requests queues)")
    worker.add_argument("--events", "-E", action="store_true", help="send task events (for flower)")
    worker.add_argument("--gossip", action="store_true",
                        help="enable gossip and mingle (off: faster start, less broker traffic)")
    worker.add_argument("celery_args", nargs=argparse.REMAINDER, help="passed to celery worker")

    cluster = commands.add_parser("cluster", help="change the cluster state held in Redis",
                                  description="Change the cluster state held in Redis.")
    actions = cluster.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    apply = _add(actions, "apply", "load a snapshot of GPUStack worker and instance rows", _cluster_apply,
                 "Replace the cluster with a snapshot (applied in this process). Exit 0 applied, "
                 "2 invalid snapshot, 1 Redis unreachable.")
    apply.add_argument("file", metavar="FILE.json",
                       help='{"workers": [...], "model_instances": [...]}; - for stdin')
    apply.add_argument("--pretty", action="store_true", help="indent the JSON output")
    apply.add_argument("--recover", action="store_true",
                       help="after Redis lost its data: rebuild from FILE (also its 'bookings', as "
                            "'cluster export' writes them) and resume deciding")
    apply.add_argument("--force", action="store_true",
                       help="with --recover: recover even though Redis holds its data generation and no loss "
                            "was detected (supersedes the live generation)")
    apply.add_argument("--dry-run", action="store_true",
                       help="change nothing: print the workers, instances and bookings it would add, "
                            "remove or change, and whether it needs --allow-removal")
    apply.add_argument("--allow-removal", action="store_true",
                       help="confirm a snapshot that removes more than max_removed_fraction of the workers")
    export = _add(actions, "export", "print the cluster and gpusched's bookings as a recovery document",
                  _cluster_export, "Print the workers, the control plane's instances and gpusched's "
                  "bookings as one JSON document that 'cluster apply --recover' takes after Redis lost "
                  "its data. Exit 0, 1 Redis unreachable.")
    export.add_argument("--pretty", action="store_true", help="indent the JSON output")
    event = _add(actions, "event", "send cluster events (worker_state, instance_deleted, ...)",
                 _cluster_event,
                 "Validate cluster events against the event schema and the current cluster, then "
                 "queue them on gpusched.cluster (nothing is queued if any is invalid). Exit 0 "
                 "queued, 2 invalid (the field is named), 1 Redis unreachable.")
    event.add_argument("file", metavar="FILE.json", help="an event or a list of events; - for stdin")
    event.add_argument("--local", action="store_true", help="apply here instead of via the queue")
    event.add_argument("--pretty", action="store_true", help="indent the JSON output")
    if cluster_actions is not None:
        cluster_actions(actions)

    acl = _add(commands, "acl", "print the Redis ACL users for redis-server --aclfile", _acl,
               "Print the Redis ACL file: the default user off, gpusched-service, gpusched-control and "
               "gpusched-submit with the SHA-256 of their passwords, read from REDIS_SERVICE_PASSWORD, "
               "REDIS_CONTROL_PASSWORD and REDIS_SUBMIT_PASSWORD, and the read-only gpusched-console "
               "when REDIS_CONSOLE_PASSWORD is set (docs/security.md). With --cluster ID "
               "the users of that partition (gpusched-ID-service, ...), whose key patterns reach only "
               "its keys; several --cluster options share one server, each partition's passwords read "
               "from REDIS_<ROLE>_PASSWORD_<ID>. Exit 0, 2 a password missing or shared.")
    acl.add_argument("--cluster", action="append", default=None, metavar="ID",
                     help="the partition whose users to print (repeatable; default: GPUSCHED_CLUSTER)")
    acl.add_argument("--out", default=None, metavar="FILE",
                     help="write it here (mode 0644: it holds hashes, no password) instead of printing it")
    add_output_option(acl, "text")

    replay = _add(commands, "replay", "re-run recorded decisions and compare", _replay,
                  "Re-run recorded decisions from the event log (from a checkpoint, or the archive) and "
                  "compare their digests; progress on stderr. Exit 0 all identical, 1 some differ or "
                  "could not be rebuilt, 2 nothing to replay for --request-id.")
    replay.add_argument("--request-id", default=None, metavar="ID", help="only this request's decisions")
    replay.add_argument("--since", default=None, metavar="ID", type=stream_id,
                        help="only decisions logged at or after this event-stream id (<ms>[-<seq>])")
    replay.add_argument("--archive", default=None, metavar="DIR",
                        help="read the archived (trimmed) log in DIR first and replay from version 0")
    add_output_option(replay, "text")

    audit = commands.add_parser("audit", help="audit log checkpoints, trimming and export",
                                description="Audit log checkpoints, trimming and export.")
    audit_actions = audit.add_subparsers(dest="audit_command", required=True, metavar="ACTION")
    checkpoint = _add(audit_actions, "checkpoint", "checkpoint the cluster now (replay can start there)",
                      _audit_checkpoint)
    checkpoint.add_argument("--pretty", action="store_true", help="indent the JSON output")
    trim = _add(audit_actions, "trim",
                "trim the log behind the oldest checkpoint kept (archived first if configured)", _audit_trim)
    trim.add_argument("--pretty", action="store_true", help="indent the JSON output")
    export = _add(audit_actions, "export", "write the log (before --before) as JSON lines into DIR",
                  _audit_export)
    export.add_argument("folder", metavar="DIR", help="archive folder (created if missing)")
    export.add_argument("--before", default=None, metavar="ID", type=stream_id,
                        help="only events before this stream id (<ms>[-<seq>])")
    export.add_argument("--pretty", action="store_true", help="indent the JSON output")
