"""Service subcommands of ``gpusched``: ``submit``, ``worker``, ``cluster apply|event``, ``replay``,
``audit checkpoint|trim|export``.

Nothing here imports Celery or Redis at module import time (the offline
commands must work without them); handlers import lazily. One-line errors are
raised as :class:`tasks.edges.cli_offline.CliError`: exit 2 for bad input (or a
rejected request), 1 for a service failure (Redis unreachable or out of memory,
its data lost and not recovered, a timeout, replay differences or decisions
replay could not rebuild).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tasks.edges.cli_offline import CliError, read_json


@contextmanager
def _service_errors() -> Iterator[None]:
    """Turn Redis/broker outages into a one-line exit-1 error."""
    import redis
    from kombu.exceptions import OperationalError

    from tasks.runtime.outages import RedisOutOfMemory
    from tasks.runtime.settings import get_settings
    from tasks.state.generation import DataLost

    try:
        yield
    except DataLost as error:
        raise CliError(str(error), 1) from None
    except redis.exceptions.OutOfMemoryError as error:  # before ConnectionError: a RedisError too
        message = str(error) if isinstance(error, RedisOutOfMemory) else f"Redis is out of memory: {error}"
        raise CliError(message, 1) from None
    except (redis.ConnectionError, redis.TimeoutError, OperationalError) as error:
        url = get_settings().redis_url
        raise CliError(f"cannot reach Redis at {url}: {error}", 1) from None


def _client() -> Any:
    from pydantic import ValidationError

    from tasks.edges.client import ServiceClient

    try:
        return ServiceClient()
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        raise CliError(f"invalid GPUSCHED_* settings: {first['loc']}: {first['msg']}") from None


def _print(value: Any, pretty: bool) -> None:
    print(json.dumps(value, indent=2 if pretty else None, sort_keys=False))


# -------------------------------------------------------------------- submit
def _submit(args: argparse.Namespace) -> int:
    from tasks.edges.client import Submission, WaitTimeout

    document = read_json(args.file)
    requests = document if isinstance(document, list) else [document]
    rejected: list[str] = []
    with _service_errors():
        client = _client()
        for request in requests:
            try:
                outcome = client.submit(request, wait=args.wait, timeout=args.timeout,
                                        terminal=args.terminal)
            except WaitTimeout as error:
                raise CliError(str(error), 1) from None
            value = outcome.to_dict() if isinstance(outcome, Submission) else outcome
            _print(value, args.pretty)
            rejected.extend(_rejection_line(value))
            rejected.extend(_conflict_line(value))
    if rejected:
        raise CliError("rejected: " + "; ".join(rejected))
    return 0


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
    from tasks.runtime.celery_app import app
    from tasks.runtime.settings import get_settings
    from tasks.state.keys import Keys

    settings = get_settings()
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
        client = _client()
        try:
            summary = client.apply_cluster(document, recover=args.recover, allow_removal=args.allow_removal,
                                           dry_run=args.dry_run)
        except ValueError as error:  # pydantic.ValidationError is a ValueError
            raise _invalid_input(error) from None
    _print(summary, args.pretty)
    return 0


#: Environment variable holding the password of each ACL role (``gpusched acl``).
ACL_PASSWORD_ENV = {"service": "REDIS_SERVICE_PASSWORD", "control": "REDIS_CONTROL_PASSWORD",
                    "submit": "REDIS_SUBMIT_PASSWORD"}


def _acl(args: argparse.Namespace) -> int:
    import os

    from tasks.runtime.acl import acl_file
    from tasks.runtime.settings import get_settings
    from tasks.state.keys import Keys

    passwords = {role: os.environ.get(name, "") for role, name in ACL_PASSWORD_ENV.items()}
    missing = [ACL_PASSWORD_ENV[role] for role, password in passwords.items() if not password]
    if missing:
        raise CliError(f"set {', '.join(missing)} (the password of each Redis user)")
    text = acl_file(passwords, Keys(get_settings().cluster))
    if args.out is None:
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
    failed: list[str] = []
    with _service_errors():
        client = _client()
        for event in events:
            summary = client.cluster_event(event, queue=not args.local)
            _print(summary, args.pretty)
            if summary.get("status") == "rejected":
                failed.append(f"{summary.get('field') or 'event'}: {summary.get('error')}")
    if failed:
        raise CliError("rejected cluster event: " + "; ".join(failed))
    return 0


# -------------------------------------------------------------------- replay
def _replay(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from tasks.audit.archive import archive_files
    from tasks.audit.replay import ReplayError, format_report, replay

    def progress(phase: str, done: int) -> None:
        what = "events read" if phase == "read" else "decisions replayed"
        print(f"replay: {done} {what}", file=sys.stderr, flush=True)

    with _service_errors():
        client = _client()
        files = archive_files(Path(args.archive), client.rt.settings.cluster or "") if args.archive else []
        if args.archive and not files:
            raise CliError(f"no archive files in {args.archive}")
        try:
            report = replay(client.rt.client, client.rt.cluster, request_id=args.request_id,
                            since=args.since, archive=files, progress=progress)
        except ReplayError as error:
            raise CliError(f"cannot replay: {error}", 1) from None
    print(format_report(report))
    if report.differ:
        raise CliError(f"{report.differ} decision(s) differ on replay", 1)
    if report.skipped:
        raise CliError(f"{len(report.skipped)} decision(s) could not be replayed", 1)
    return 0


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
        written = write_archive(entries_before(rt.client, rt.keys.events, before), Path(args.folder),
                                rt.settings.cluster or "")
    _print({"file": str(written) if written else None}, args.pretty)
    return 0


def _after_last(client: Any, stream: str) -> str:
    last = client.xrevrange(stream, count=1)
    if not last:
        return "0-1"
    ms, _, seq = str(last[0][0]).partition("-")
    return f"{ms}-{int(seq) + 1}"


def _add(commands: Any, name: str, help_text: str, handler: Callable[[argparse.Namespace], int]) -> Any:
    parser = commands.add_parser(name, help=help_text)
    parser.set_defaults(handler=handler)
    return parser


#: The one-line handling of Redis outages and of bad settings, for the other command modules.
service_errors = _service_errors
service_client = _client


def register(commands: Any, cluster_actions: Callable[[Any], None] | None = None) -> None:
    """Add the service subcommands to the ``gpusched`` subparsers.

    Args:
        cluster_actions: adds more ``gpusched cluster`` actions to its subparsers.
    """
    submit = _add(commands, "submit", "put REQUEST.json on gpusched.requests (Contract 3)", _submit)
    submit.add_argument("file", metavar="FILE.json", help="a request or a list of requests; - for stdin")
    submit.add_argument("--wait", action="store_true", help="print the result when it is published")
    submit.add_argument("--terminal", action="store_true",
                        help="with --wait: skip the 'unschedulable' notice, wait for the final result")
    submit.add_argument("--timeout", type=float, default=30.0, metavar="S", help="seconds to wait (30)")
    submit.add_argument("--pretty", action="store_true", help="indent the JSON output")

    worker = _add(commands, "worker", "run a Celery worker (celery -A tasks.app worker)", _worker)
    worker.add_argument("--concurrency", "-c", type=int, default=None, help="pool processes")
    worker.add_argument("--pool", default="prefork", choices=["prefork", "solo", "threads"])
    worker.add_argument("--loglevel", "-l", default=None)
    worker.add_argument("--hostname", "-n", default=None)
    worker.add_argument("--queues", "-Q", default=None,
                        help="comma-separated queues (default: cluster, commits and requests queues)")
    worker.add_argument("--events", "-E", action="store_true", help="send task events (for flower)")
    worker.add_argument("--gossip", action="store_true",
                        help="enable gossip and mingle (off: faster start, less broker traffic)")
    worker.add_argument("celery_args", nargs=argparse.REMAINDER, help="passed to celery worker")

    cluster = commands.add_parser("cluster", help="change the cluster state held in Redis")
    actions = cluster.add_subparsers(dest="cluster_command", required=True)
    apply = _add(actions, "apply", "load a snapshot of GPUStack worker and instance rows", _cluster_apply)
    apply.add_argument("file", metavar="FILE.json", help='{"workers": [...], "model_instances": [...]}')
    apply.add_argument("--recover", action="store_true",
                       help="after Redis lost its data: rebuild from FILE (also its 'bookings', as "
                            "'cluster export' writes them) and resume deciding")
    apply.add_argument("--dry-run", action="store_true",
                       help="change nothing: print the workers, instances and bookings it would add, "
                            "remove or change, and whether it needs --allow-removal")
    apply.add_argument("--allow-removal", action="store_true",
                       help="confirm a snapshot that removes more than max_removed_fraction of the workers")
    apply.add_argument("--pretty", action="store_true")
    export = _add(actions, "export", "print the cluster and gpusched's bookings as a recovery document",
                  _cluster_export)
    export.add_argument("--pretty", action="store_true", help="indent the JSON output")
    event = _add(actions, "event", "send cluster events (worker_state, instance_deleted, ...)",
                 _cluster_event)
    event.add_argument("file", metavar="FILE.json", help="an event or a list of events")
    event.add_argument("--local", action="store_true", help="apply here instead of via the queue")
    event.add_argument("--pretty", action="store_true")
    if cluster_actions is not None:
        cluster_actions(actions)

    acl = _add(commands, "acl", "print the Redis ACL users (service, control, submit) for redis-server "
               "--aclfile, from the passwords in REDIS_<ROLE>_PASSWORD", _acl)
    acl.add_argument("--out", default=None, metavar="FILE",
                     help="write it here (mode 0644: it holds hashes, no password) instead of printing it")

    replay = _add(commands, "replay", "re-run recorded decisions and compare", _replay)
    replay.add_argument("--request-id", default=None, help="only this request's decisions")
    replay.add_argument("--since", default=None, metavar="ID",
                        help="only decisions logged at or after this event-stream id")
    replay.add_argument("--archive", default=None, metavar="DIR",
                        help="read the archived (trimmed) log in DIR first and replay from version 0")

    audit = commands.add_parser("audit", help="audit log checkpoints, trimming and export")
    audit_actions = audit.add_subparsers(dest="audit_command", required=True)
    checkpoint = _add(audit_actions, "checkpoint", "checkpoint the cluster now (replay can start there)",
                      _audit_checkpoint)
    checkpoint.add_argument("--pretty", action="store_true")
    trim = _add(audit_actions, "trim",
                "trim the log behind the oldest checkpoint kept (archived first if configured)", _audit_trim)
    trim.add_argument("--pretty", action="store_true")
    export = _add(audit_actions, "export", "write the log (before --before) as JSON lines into DIR",
                  _audit_export)
    export.add_argument("folder", metavar="DIR", help="archive folder (created if missing)")
    export.add_argument("--before", default=None, metavar="ID", help="only events before this stream id")
    export.add_argument("--pretty", action="store_true")
