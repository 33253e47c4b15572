"""What one cluster change costs with many parked requests (issue 17, item 8).

A private ``redis-server`` and ``--workers`` real ``celery -A tasks.app worker``
processes; a cluster of ``--cluster-workers`` hosts × 2 RTX 4090s, each GPU held
by a control-plane instance of 20 GiB; ``--parked`` requests wait for a GPU,
half ``policy: gpustack`` (a 7B, automatic tp) and half ``policy: precise``
(the same model at ``--tp-size 1``). Then, one after another:

* ``snapshot (identical)`` — the same snapshot applied again;
* ``snapshot (frees 1 GPU)`` — the snapshot without one instance;
* ``instance_deleted`` — a ``gpusched.cluster_event`` deleting another one.

Printed per change: parked requests, the change, decisions run
(``sched.decision.made`` events), messages queued (decide messages sent by wakes,
``sched.request.woken``, and by the watchdog, ``sched.request.redriven``), the
longest the queues grew (sampled every 20 ms), and seconds until the pipeline
drained (queues, held messages, outbox and follow-ups empty). Requests parking
happens before the clock starts.

    .venv/bin/python bench/bench_wakeups.py                  # 2,000 parked
    .venv/bin/python bench/bench_wakeups.py --parked 20000 --workers 2
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "tests"))

from service.support import GIB, Deployment, llm_request, worker_row  # noqa: E402

from tasks.edges.localrun import start_redis  # noqa: E402


def snapshot(hosts: int) -> dict[str, Any]:
    """``hosts`` × 2 RTX 4090s, each GPU held by a 20 GiB control-plane instance."""
    instances = []
    for wid in range(1, hosts + 1):
        for gpu in range(2):
            number = (wid - 1) * 2 + gpu + 1
            instances.append({
                "id": number, "name": f"cp-{number}", "model_id": 900, "worker_id": wid,
                "worker_name": f"node-{wid:04d}", "gpu_type": "cuda", "gpu_indexes": [gpu],
                "computed_resource_claim": {"vram": {str(gpu): 20 * GIB}},
            })
    return {"workers": [worker_row(w, 2) for w in range(1, hosts + 1)], "model_instances": instances}


def waiter(number: int) -> dict[str, Any]:
    """Even: gpustack, automatic tp; odd: precise, tp 1."""
    request = llm_request(f"wait-{number:06d}")
    if number % 2:
        request["model"]["backend_parameters"] = ["--tp-size", "1"]
        request["policy"] = "precise"
    return request


def _count(d: Deployment, event_type: str) -> int:
    return len(d.events(event_type))


def _drained(d: Deployment) -> bool:
    return d.idle() and d.redis.zcard(d.keys.followups) == 0


def measure(d: Deployment, parked: int, kind: str, change: Any) -> None:
    """Run ``change()`` and print what it cost until the pipeline drained."""
    types = ("sched.decision.made", "sched.request.woken", "sched.request.redriven")
    before = {t: _count(d, t) for t in types}
    started = time.monotonic()
    change()
    peak = 0
    quiet_since: float | None = None
    while True:  # drained, and still drained 1 s later (a follow-up's re-check may be pending)
        peak = max(peak, sum(int(d.redis.llen(q)) for q in d.keys.queues))
        if _drained(d):
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 1.0:
                break
        else:
            quiet_since = None
        time.sleep(0.02)
    seconds = quiet_since - started
    after = {t: _count(d, t) - n for t, n in before.items()}
    messages = after["sched.request.woken"] + after["sched.request.redriven"]
    decisions = after["sched.decision.made"]
    print(f"{parked:>7} {kind:<24} {decisions:>10} {messages:>9} {peak:>10} {seconds:>9.2f}", flush=True)


def park(d: Deployment, count: int) -> None:
    for number in range(count):
        d.client.submit(waiter(number))
    deadline = time.monotonic() + 3600
    while len(d.client.rt.parked.entries()) < count or not _drained(d):
        if time.monotonic() > deadline:
            raise SystemExit("the waiters did not park within an hour")
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parked", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--cluster-workers", type=int, default=50, help="hosts of 2 GPUs")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="gpusched-wakeups-"))
    server = start_redis(directory=folder / "redis")
    # no audit checkpoints: the log is never trimmed, so the events a change causes are all counted
    d = Deployment(server.url, folder, {"log_level": "WARNING", "wake_recheck_s": 0.5,
                                        "audit_checkpoint_every": 0})
    try:
        document = snapshot(args.cluster_workers)
        d.client.apply_cluster(document)
        d.start_workers(args.workers)
        started = time.monotonic()
        park(d, args.parked)
        print(f"{args.parked} parked in {time.monotonic() - started:.0f} s with {args.workers} worker "
              f"processes (shared machine: seconds are indicative)")
        print(f"{'parked':>7} {'change':<24} {'decisions':>10} {'messages':>9} {'peak queue':>10} "
              f"{'drain s':>9}")
        measure(d, args.parked, "snapshot (identical)", lambda: d.client.apply_cluster(document))
        fewer = copy.deepcopy(document)
        fewer["model_instances"] = fewer["model_instances"][1:]
        measure(d, len(d.client.rt.parked.entries()), "snapshot (frees 1 GPU)",
                lambda: d.client.apply_cluster(fewer))
        measure(d, len(d.client.rt.parked.entries()), "instance_deleted",
                lambda: d.client.cluster_event({"kind": "instance_deleted", "instance_id": 2}))
    finally:
        d.stop()
        server.stop()


if __name__ == "__main__":
    main()
