"""The service half of ``make demo``: the whole Redis + Celery pipeline, end to end.

Self-contained: uses ``GPUSCHED_REDIS_URL`` when a Redis answers there (in a
private partition ``gpusched:{demo-<pid>}:*`` that is deleted afterwards),
else starts a private ``redis-server`` on a free port (installing Debian's
package first when it is missing and we are root). Then it starts two real
worker processes, applies ``examples/service/cluster.json``, submits the
example requests (one twice, one invalid), prints the results and the event
log, frees a GPU with a cluster event so the parked request gets placed,
replays the log, and stops everything it started.
"""

from __future__ import annotations

import json
import os
import tempfile
import textwrap
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tasks.edges.cli_support import redact_url

#: Example files shipped with the repository.
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "service"
#: Settings the demo's workers run with (quick drains; logs only on trouble).
DEMO_ENV = {"GPUSCHED_LOG_LEVEL": "WARNING", "GPUSCHED_DRAIN_INTERVAL_S": "0.1"}
#: Width of the demo's lines; longer messages wrap (never cut).
WIDTH = 110
_GIB = 1 << 30


def _say(text: str = "") -> None:
    print(text, flush=True)


@contextmanager
def _redis() -> Iterator[tuple[str, str | None]]:
    """(redis url, partition id or None) — an existing Redis, or a private server."""
    from tasks.edges.localrun import ensure_redis_binary, reachable, start_redis

    url = os.environ.get("GPUSCHED_REDIS_URL", "redis://localhost:6379/0")
    if reachable(url):
        _say(f"Using the Redis at {redact_url(url)} (private partition, removed afterwards).")
        yield url, f"demo-{os.getpid()}"
        return
    ensure_redis_binary()
    server = start_redis()
    _say(f"No Redis at {redact_url(url)}: started redis-server on {server.url}.")
    try:
        yield server.url, None
    finally:
        server.remove()


def _candidate_line(result: dict[str, Any]) -> str:
    chosen = result["candidates"][result["selected"]]
    launch = " ".join((result.get("launch") or {}).get("backend_parameters") or [])
    subs = chosen.get("subordinate_workers") or []
    where = f"{chosen['worker_name']} GPUs {chosen['gpu_indexes']}"
    if subs:
        where += " + " + ", ".join(f"{s['worker_name']} GPUs {s['gpu_indexes']}" for s in subs)
    return f"on {where}; launch: {launch or '(no extra flags)'}"


def _wrapped(head: str, text: str) -> str:
    """``head`` followed by ``text`` wrapped to :data:`WIDTH`, continuation lines under the text."""
    if not text.strip():
        return head.rstrip()
    return textwrap.fill(" ".join(text.split()), WIDTH, initial_indent=head,
                         subsequent_indent=" " * len(head), break_on_hyphens=False)


def describe_result(result: dict[str, Any]) -> str:
    """A Contract 1 result, readable (long messages wrap; nothing is cut)."""
    status = result["status"]
    head = f"  {result['request_id']:<16} {status:<14}"
    if status == "scheduled" and result.get("selected") is not None:
        return _wrapped(head, _candidate_line(result))
    if status == "rejected":
        error = result.get("error") or {}
        return _wrapped(head, f"{error.get('field') or 'request'}: {error.get('message')}")
    text = (result.get("messages") or [result.get("state_message") or ""])[-1]
    return _wrapped(head, text.replace("- ", ""))


def gib(amount: int) -> str:
    """Bytes as GiB with two decimals."""
    return f"{amount / _GIB:.2f} GiB"


def describe_claims(claims: Mapping[str, int], names: Mapping[int, str]) -> str:
    """A booking's claims (GPU key ``<worker>:<type>:<index>`` → bytes, as its event records them)
    as ``<worker name> <type>:<index> <GiB>`` (the type is what lies between the first and last colon)."""
    shown = []
    for key, amount in claims.items():
        worker, _, rest = key.partition(":")
        gpu_type, _, index = rest.rpartition(":")
        name = names.get(int(worker), f"worker {worker}")
        shown.append(f"{name} {gpu_type}:{index} {gib(int(amount))}")
    return ", ".join(shown)


def describe_event(fields: dict[str, str], names: Mapping[int, str] | None = None) -> str:
    """An audit event, readable: claims in GiB on named workers; long lines wrap (nothing is cut).

    Args:
        fields: the stream entry.
        names: worker id → name (ids are shown when a name is unknown).
    """
    names = names or {}
    data = json.loads(fields.get("data") or "{}")
    version = f"v{fields['cluster_version']}" if fields.get("cluster_version") else ""
    detail = ""
    kind = fields["type"]
    if kind == "sched.decision.made":
        detail = f"{data['outcome']['status']} ({data['outcome']['candidate_count']} candidates)"
        if data.get("reasons"):
            detail += f" reasons={data['reasons']}"
    elif kind == "sched.request.parked":
        detail = str(data.get("reasons"))
    elif kind == "sched.reservation.conflicted":
        detail = ", ".join(f"{g.get('gpu')}: {gib(int(g.get('claim') or 0))} on top of "
                           f"{gib(int(g.get('booked') or 0))}" for g in data.get("gpus") or [])
    elif kind == "sched.reservation.booked":
        detail = describe_claims(data.get("claims") or {}, names)
    elif kind == "sched.request.woken":
        detail = str([b.get("kind") for b in data.get("by") or []] if isinstance(data.get("by"), list)
                     else data.get("by"))
    elif kind == "sched.result.published":
        detail = data.get("status", "")
    elif kind == "sched.instance.released":
        detail = ", ".join(item["key"] for item in data.get("released") or [])
    return _wrapped(f"  {kind:<28} {fields.get('request_id') or '-':<16} {version:<4} ", detail).rstrip()


class _Demo:
    def __init__(self, url: str, partition: str | None, logs: Path) -> None:
        from tasks.base.settings import Settings
        from tasks.edges.client import ServiceClient
        from tasks.edges.localrun import WorkerProcess

        env = {**DEMO_ENV, "GPUSCHED_REDIS_URL": url}
        if partition:
            env["GPUSCHED_CLUSTER"] = partition
        self.settings = Settings(redis_url=url, cluster=partition, drain_interval_s=0.1)
        self.client = ServiceClient(self.settings)
        self.workers = [WorkerProcess(env, f"demo{i}", logs / f"worker-{i}.log") for i in range(2)]

    def start(self) -> None:
        for worker in self.workers:
            worker.start()
        for worker in self.workers:
            worker.wait_ready(90)
        _say(f"Started {len(self.workers)} worker processes (celery -A tasks.app worker).")

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.client.close()

    def request(self, name: str) -> dict[str, Any]:
        value: dict[str, Any] = json.loads((EXAMPLES / "requests" / name).read_text())
        return value

    def run(self) -> int:
        from tasks.decision.replay import format_report, replay
        from tasks.state.streams import iter_stream

        cluster = json.loads((EXAMPLES / "cluster.json").read_text())
        worker_names = {int(w["id"]): str(w["name"]) for w in cluster["workers"]}
        applied = self.client.apply_cluster(cluster)
        names = [w["name"] + ("" if w["state"] == "ready" else f" ({w['state']})")
                 for w in cluster["workers"]]
        _say(f"\nApplied examples/service/cluster.json: {', '.join(names)} (version {applied['version']}).")
        _say("\nSubmitting the example requests (--wait):")
        for name in sorted(p.name for p in (EXAMPLES / "requests").glob("*.json")):
            result = self.client.submit(self.request(name), wait=True, timeout=60)
            _say(describe_result(result))  # type: ignore[arg-type]
            parked = self.client.rt.parked.entries().get(result["request_id"])  # type: ignore[index]
            if parked:
                _say(f"  {'':<16} {'':<14}parked, waiting for: {json.loads(parked)['reasons']}")
        again = self.client.submit(self.request("01-qwen7b-l40s.json"))
        _say(f"  resubmitting demo-qwen7b: {again.to_dict()['status']} (one decision per request id)")  # type: ignore[union-attr]
        _say("\nFreeing h100-a: cluster event instance_deleted(demo-llama70b) ...")
        self.client.cluster_event({"kind": "instance_deleted", "request_id": "demo-llama70b"})
        placed = self.client.wait("demo-qwen72b", timeout=60, terminal=True)
        _say(describe_result(placed) + "   <- woken and placed")
        _say("\nEvent log (gpusched:events):")
        for _, fields in iter_stream(self.client.rt.client, self.client.rt.keys.events):
            _say(describe_event(fields, worker_names))
        report = replay(self.client.rt.client, self.client.rt.cluster)
        _say("\nReplay of every recorded decision:\n  " + format_report(report).replace("\n", "\n  "))
        return 0 if report.differ == 0 else 1


def _forget_partition(url: str, partition: str) -> None:
    from tasks.base.keys import Keys
    from tasks.edges.localrun import reachable

    if not reachable(url):
        return
    import redis

    client = redis.Redis.from_url(url, decode_responses=True)
    keys = Keys(partition)
    doomed = [*client.scan_iter(match=f"{keys.prefix}:*"), *keys.queues]
    doomed += [k for k in client.scan_iter(match="_kombu.binding*") if partition in k]
    if doomed:
        client.delete(*doomed)
    client.close()


def run_service_demo() -> int:
    """Run the service demo; returns a process exit code (1 if anything failed)."""
    _say("\n=== gpusched service: Redis + Celery workers ===")
    try:
        with _redis() as (url, partition), tempfile.TemporaryDirectory(prefix="gpusched-demo-") as logs:
            demo = _Demo(url, partition, Path(logs))
            try:
                demo.start()
                started = time.monotonic()
                code = demo.run()
                _say(f"\nThe pipeline part took {time.monotonic() - started:.2f} s.")
                return code
            finally:
                demo.stop()
                if partition:
                    _forget_partition(url, partition)
    except RuntimeError as error:
        _say(f"service demo skipped: {error}")
        return 1


if __name__ == "__main__":
    raise SystemExit(run_service_demo())
