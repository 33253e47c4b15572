"""Health checks: can this worker node, or the deployment, do its job right now?

A check is a function ``(Runtime) -> Check``; a list of them is run in order
by :func:`run_checks`, and the first failing one says why. Two lists:

* :data:`NODE_CHECKS`, behind a worker node's ``/healthz``
  (:mod:`tasks.runtime.middleware.metrics_server`): Redis answers, and this
  node's drainer thread finished a pass within ``health_stale_after_s``;
* :data:`DEPLOYMENT_CHECKS`, behind ``gpusched health``: Redis answers, and at
  least one worker node has a fresh heartbeat and a drainer that finished a
  pass within ``health_stale_after_s`` (any node's drainer serves the whole
  partition).

Both lists also check the data generation (:func:`data_generation_ok`: a
wiped or rolled-back Redis, or a detected loss no recovery has cleared);
``gpusched health`` also that writes reach a replica (:func:`writes_acknowledged`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis

from tasks.base import liveness
from tasks.state.context import Runtime

#: When this process's node booted (a drainer gets ``health_stale_after_s`` to finish its first pass).
BOOTED = "node_boot"


@dataclass(frozen=True, slots=True)
class Check:
    """One check's verdict: ``detail`` says what was found (why, when not ``ok``)."""

    name: str
    ok: bool
    detail: str


HealthCheck = Callable[[Runtime], Check]


def redis_reachable(rt: Runtime) -> Check:
    """Redis answers a PING (its error class and message otherwise; never the URL, it may hold a password)."""
    started = time.perf_counter()
    try:
        rt.client.ping()
    except (redis.RedisError, OSError) as error:
        return Check("redis", False, f"Redis does not answer ({type(error).__name__}: {error})")
    return Check("redis", True, f"PING answered in {(time.perf_counter() - started) * 1000:.1f} ms")


def drainer_alive(rt: Runtime) -> Check:
    """This node's drainer finished a pass within ``health_stale_after_s`` (or the node is younger)."""
    stale = rt.settings.health_stale_after_s
    now = time.time()
    last = liveness.last_pass(liveness.DRAINER)
    if last is not None and now - last <= stale:
        return Check("drainer", True, f"last pass {now - last:.1f} s ago")
    booted = liveness.last_pass(BOOTED)
    if last is None and booted is not None and now - booted <= stale:
        return Check("drainer", True, "starting: no pass finished yet")
    since = "never" if last is None else f"{now - last:.0f} s ago"
    return Check("drainer", False, f"the drainer last finished a pass {since} (limit {stale:g} s)")


def worker_nodes_live(rt: Runtime) -> Check:
    """At least one worker node beats and drains within ``health_stale_after_s``."""
    stale_ms = rt.settings.health_stale_after_s * 1000
    now_ms = time.time() * 1000
    nodes = {name: json.loads(raw) for name, raw in rt.client.hgetall(rt.keys.nodes).items()}
    live = {name for name, beat in nodes.items() if now_ms - float(beat.get("seen_ms") or 0) <= stale_ms}
    draining = {name for name in live if now_ms - float(nodes[name].get("drained_ms") or 0) <= stale_ms}
    stale = len(nodes) - len(live)
    summary = f"{len(live)} worker node(s) live, {len(draining)} draining, {stale} stale"
    if not live:
        return Check("workers", False, f"no live worker node ({summary})")
    if not draining:
        return Check("workers", False, f"no worker node's drainer finished a recent pass ({summary})")
    return Check("workers", True, summary)


def data_generation_ok(rt: Runtime) -> Check:
    """The data Redis holds is the service's (:mod:`tasks.state.generation`).

    Fails when a loss was detected and not recovered (the marker), when this
    process sees Redis wiped, replaced or rolled back (it then writes the
    marker, as every check does), and when Redis holds no generation although
    worker nodes are registered (they write it when they boot: it was wiped
    before any process that knew it looked). A Redis with neither is a
    deployment no worker has started yet: this check passes, the worker check
    says so. Never writes a first generation.
    """
    status = rt.generation.check(create=False)
    if status.verdict != "new":
        return Check("data", status.ok, status.detail)
    if not rt.client.hlen(rt.keys.nodes):
        return Check("data", True, "no data generation yet: no worker node has started")
    return Check("data", False, "no data generation: Redis is empty or lost its data "
                 "(no worker node has checked it since)")


def writes_acknowledged(rt: Runtime) -> Check:
    """With replicas required: no write has waited for a replica longer than ``health_stale_after_s``
    (:mod:`tasks.state.replication`); the detail says when the master acknowledges alone."""
    if not rt.replication.required:
        return Check("replication", True, "no replica required")
    position = rt.replication.position()
    stale = rt.settings.health_stale_after_s
    oldest: float | None = None
    for stream in (rt.keys.results, rt.keys.events):
        after = f"({position.streams.get(stream, '0-0')}" if position else "-"
        waiting = rt.client.xrange(stream, min=after, max="+", count=1)
        if waiting:
            written_s = int(str(waiting[0][0]).partition("-")[0]) / 1000
            oldest = written_s if oldest is None else min(oldest, written_s)
    if oldest is not None and time.time() - oldest > stale:
        return Check("replication", False, f"writes have waited {time.time() - oldest:.0f} s for a replica "
                     f"(limit {stale:g} s): readers do not see them yet")
    if position is not None and position.replicas == 0:
        return Check("replication", True, "acknowledged by the master alone: no replica attached")
    replicas = position.replicas if position else 0
    return Check("replication", True, f"acknowledged by {replicas} replica(s)")


#: Behind a worker node's ``/healthz``.
NODE_CHECKS: tuple[HealthCheck, ...] = (redis_reachable, data_generation_ok, drainer_alive)
#: Behind ``gpusched health``.
DEPLOYMENT_CHECKS: tuple[HealthCheck, ...] = (
    redis_reachable, data_generation_ok, worker_nodes_live, writes_acknowledged,
)


def run_checks(rt: Runtime, checks: Sequence[HealthCheck]) -> list[Check]:
    """Run ``checks`` in order; once Redis is unreachable, the checks that read it are not run."""
    verdicts: list[Check] = []
    for check in checks:
        try:
            verdict = check(rt)
        except (redis.RedisError, OSError) as error:
            verdict = Check(check.__name__, False, f"Redis error ({type(error).__name__}: {error})")
        verdicts.append(verdict)
        if verdict.name == "redis" and not verdict.ok:
            break
    return verdicts


def first_failure(verdicts: Sequence[Check]) -> Check | None:
    """The first failing check (None: healthy)."""
    return next((verdict for verdict in verdicts if not verdict.ok), None)
