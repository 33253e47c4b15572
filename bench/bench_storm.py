"""The storm: a cluster loses a tenth of its workers at once; how fast is everything placed again?

A private ``redis-server`` and ``--workers`` real ``celery -A tasks.app worker``
processes; a ``--cluster-workers`` × 8 H100 cluster (``bench_service.cluster``)
with ``--placements`` gpusched placements, submitted with ``submit_many`` and
booked before the clock starts (tp 1 and 2, from ``bench_service.plan``).
Then one snapshot drops ``--lost`` of the workers (every tenth host): their
bookings are released and each becomes a new request ``<id>~1``, decided in
``gpusched.decide_batch`` messages (the follow-up of the snapshot, run by the
process that applied it, as ``gpusched cluster apply`` does).

Printed: the placements displaced, seconds from the snapshot until every
displaced placement is placed again or parked (its successor has a result),
decisions per second during the storm, how many were placed and parked, and
the decision messages' shape (``sched.decision.made`` events per decider);
then the storm's timeline in seconds after the snapshot was sent (t0): the
snapshot applied, the grace end (the first successor recorded), each
decision message sent (its size), the first and last decision, and per
message its first and last decision and its rounds (from the workers'
``batch_finished`` log lines), so the figure can be read.
The snapshot drops workers, which the service reschedules at once (below the
mass-outage guard's ``max_unreachable_fraction``): no grace period applies.
A ``worker_state`` outage would add ``unreachable_grace_s`` before the same
storm. ``--decide-batch-size 1`` runs the storm with single messages (as
before batches).

    .venv/bin/python bench/bench_storm.py                       # 2,000 x 8, 4,000 placements
    .venv/bin/python bench/bench_storm.py --decide-batch-size 1
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_service import batches_logged, cluster, plan  # noqa: E402


def _place(client: Any, requests: list[dict[str, Any]], batch: int) -> None:
    """Submit ``requests`` ``batch`` at a time and wait until every one has a result."""
    for start in range(0, len(requests), batch):
        client.submit_many(requests[start:start + batch])
    for request in requests:
        client.wait(request["request_id"], timeout=600)


def _displaced(client: Any, lost: set[int]) -> list[str]:
    """Request ids of the bookings on a lost worker (leader or subordinate)."""
    return sorted(meta.request_id or "" for meta in client.rt.cluster.instance_meta().values()
                  if meta.request_id and set(meta.workers) & lost)


def _successors_done(client: Any, displaced: list[str]) -> tuple[int, int, int]:
    """How many displaced placements were placed again, parked, and still unanswered."""
    pipe = client.rt.client.pipeline(transaction=False)
    for rid in displaced:
        pipe.hget(client.rt.keys.request(rid), "moved_to")
    moved = pipe.execute()
    pipe = client.rt.client.pipeline(transaction=False)
    for new_id in moved:
        pipe.hget(client.rt.keys.request(new_id or "-"), "state")
    states = Counter(pipe.execute())
    return states.get("done", 0), states.get("parked", 0), len(displaced) - states["done"] - states["parked"]


def _deciders(client: Any, since: str) -> Counter[int]:
    """Decisions per deciding message since ``since`` (a histogram: decisions in one message → count)."""
    from tasks.state.streams import iter_stream

    per_message: Counter[str] = Counter()
    for _, fields in iter_stream(client.rt.client, client.rt.keys.events, start=since):
        if fields.get("type") == "sched.decision.made":
            record = client.rt.client.hget(client.rt.keys.request(fields["request_id"]), "decider")
            per_message[str(record)] += 1
    return Counter(per_message.values())


class Sent:
    """The decision messages a runtime sends, each with the wall-clock time it left."""

    def __init__(self, rt: Any) -> None:
        self.messages: list[tuple[float, list[str]]] = []
        self._rt, self._one, self._many = rt, rt.dispatch, rt.dispatch_batch
        rt.dispatch, rt.dispatch_batch = self._dispatch, self._dispatch_batch

    def _dispatch(self, request_id: str, seq: int, attempt: int, countdown: float) -> None:
        self._one(request_id, seq, attempt, countdown)
        self.messages.append((time.time(), [request_id]))

    def _dispatch_batch(self, items: list[tuple[str, int, int]]) -> None:
        self._many(items)
        self.messages.append((time.time(), [item[0] for item in items]))


def _event_times(client: Any, since: str) -> dict[str, list[tuple[float, str]]]:
    """Per event type, ``(wall-clock seconds, request id)`` of each event after ``since``."""
    from tasks.state.streams import iter_stream

    times: dict[str, list[tuple[float, str]]] = {}
    for entry_id, fields in iter_stream(client.rt.client, client.rt.keys.events, start=f"({since}"):
        stamp = int(str(entry_id).split("-")[0]) / 1000
        times.setdefault(fields.get("type", "?"), []).append((stamp, fields.get("request_id", "")))
    return times


def timeline(t0: float, sent: Sent, events: dict[str, list[tuple[float, str]]],
             batches: list[tuple[float, dict[str, Any]]]) -> list[str]:
    """The storm's lines, in seconds after ``t0`` (the snapshot sent)."""
    def at(stamp: float) -> str:
        return f"{stamp - t0:7.2f}"

    lines = [f"{at(t0)}  snapshot sent (workers vanish: no grace, below max_unreachable_fraction)"]
    applied = events.get("sched.cluster.applied", [])
    if applied:
        lines.append(f"{at(applied[0][0])}  snapshot applied (sched.cluster.applied)")
    recorded = events.get("sched.instance.rescheduled", [])
    if recorded:
        lines.append(f"{at(recorded[0][0])}  grace end: first successor recorded")
        lines.append(f"{at(recorded[-1][0])}  last of {len(recorded)} successors recorded")
    for stamp, ids in sent.messages:
        lines.append(f"{at(stamp)}  message sent ({len(ids)} requests)")
    decided = sorted(events.get("sched.decision.made", []))
    if decided:
        lines.append(f"{at(decided[0][0])}  first decision")
        lines.append(f"{at(decided[-1][0])}  last decision ({len(decided)} decisions)")
    return lines + _per_message(t0, sent, decided, batches) + [
        f"          {len(events[kind])} x {kind}"
        for kind in ("sched.reservation.conflicted", "sched.request.redriven", "sched.request.retried")
        if events.get(kind)
    ]


def _per_message(t0: float, sent: Sent, decided: list[tuple[float, str]],
                 batches: list[tuple[float, dict[str, Any]]]) -> list[str]:
    """Each message's decisions (committed from, to) and each batch the workers logged."""
    when = {rid: stamp for stamp, rid in decided}
    lines = []
    for number, (_, ids) in enumerate(sent.messages, 1):
        mine = sorted(when[rid] for rid in ids if rid in when)
        if mine:
            lines.append(f"          message {number}: {len(mine)} decisions committed from "
                         f"{mine[0] - t0:.2f} to {mine[-1] - t0:.2f}")
    for stamp, fields in batches:
        lines.append(f"{stamp - t0:7.2f}  batch finished in {fields['log']}: decided "
                     f"{fields.get('decided')}, rounds {fields.get('rounds')}, published "
                     f"{fields.get('published', 0)}, resumed {fields.get('resumed')}")
    return lines


def run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    """One storm on a fresh database."""
    from tasks.base.settings import Settings, reset_settings
    from tasks.edges.client import ServiceClient
    from tasks.edges.localrun import WorkerProcess
    from tasks.state.context import redis_client

    os.environ["GPUSCHED_REDIS_URL"] = url
    os.environ["GPUSCHED_DECIDE_BATCH_SIZE"] = str(args.decide_batch_size)
    reset_settings()
    settings = Settings(redis_url=url, decide_batch_size=args.decide_batch_size)
    redis_client(settings).flushdb()
    client = ServiceClient(settings)
    snapshot = cluster(args.cluster_workers, 8)
    client.apply_cluster(snapshot)
    logs = Path(tempfile.mkdtemp(prefix="gpusched-storm-"))
    env = {"GPUSCHED_REDIS_URL": url, "GPUSCHED_LOG_LEVEL": "INFO",  # INFO: each batch_finished
           "GPUSCHED_DECIDE_BATCH_SIZE": str(args.decide_batch_size)}
    workers = [WorkerProcess(env, f"storm{i}", logs / f"w{i}.log").start() for i in range(args.workers)]
    try:
        for worker in workers:
            worker.wait_ready(60)
        started = time.perf_counter()
        _place(client, plan(args.placements, {1: 0.5, 2: 0.5}, "p"), max(args.decide_batch_size, 50))
        print(f"placed {args.placements} in {time.perf_counter() - started:.1f} s", flush=True)
        lost = set(range(10, args.cluster_workers + 1, round(1 / args.lost)))
        displaced = _displaced(client, lost)
        last = client.rt.client.xrevrange(client.rt.keys.events, count=1)[0][0]
        smaller = {**snapshot, "workers": [w for w in snapshot["workers"] if w["id"] not in lost]}
        sent = Sent(client.rt)
        t0 = time.time()
        started = time.perf_counter()
        client.apply_cluster(smaller)  # releases, reschedules (records + batches), in this process
        queued = time.perf_counter() - started
        while (counts := _successors_done(client, displaced))[2]:
            time.sleep(0.02)
        elapsed = time.perf_counter() - started
        shape = _deciders(client, last)
        events = _event_times(client, last)
    finally:
        for worker in workers:
            worker.stop()
        client.close()
    lines = timeline(t0, sent, events, batches_logged(logs, t0))
    shutil.rmtree(logs, ignore_errors=True)
    placed, parked, _ = counts
    return {"lost": len(lost), "displaced": len(displaced), "seconds": elapsed, "queued_s": queued,
            "per_s": len(displaced) / elapsed, "placed": placed, "parked": parked, "shape": shape,
            "timeline": lines}


#: The command line: flag, type, default, help.
OPTIONS: tuple[tuple[str, type, Any, str], ...] = (
    ("--cluster-workers", int, 2000, "hosts of 8 H100s"),
    ("--placements", int, 4000, "gpusched placements booked before the storm (tp 1 and 2)"),
    ("--lost", float, 0.1, "share of the workers lost at once"),
    ("--workers", int, 2, "worker processes"),
    ("--decide-batch-size", int, 50, "requests per gpusched.decide_batch message (1: single messages)"),
    ("--repeat", int, 1, "storms, each on a fresh database"),
)


def main(argv: list[str] | None = None) -> int:
    """Run the storm ``--repeat`` times and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, kind, default, text in OPTIONS:
        parser.add_argument(flag, type=kind, default=default, help=text)
    args = parser.parse_args(argv)

    from tasks.edges.localrun import start_redis

    server = start_redis()
    print(f"cluster {args.cluster_workers} x 8, {args.placements} placements, lose {args.lost:.0%} "
          f"of the workers, {args.workers} worker processes, decide_batch_size {args.decide_batch_size}")
    try:
        for _ in range(args.repeat):
            row = run(args, server.url)
            shape = ", ".join(f"{n}x{size}" for size, n in sorted(row["shape"].items()))
            print(f"lost {row['lost']} workers, {row['displaced']} placements displaced: all placed again "
                  f"or parked after {row['seconds']:.2f} s (snapshot + reschedule records "
                  f"{row['queued_s']:.2f} s), {row['per_s']:.0f} decisions/s; placed {row['placed']}, "
                  f"parked {row['parked']}; decisions per message: {shape}", flush=True)
            print("timeline (seconds after the snapshot was sent):", *row["timeline"], sep="\n  ", flush=True)
    finally:
        server.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main())
