"""The trust boundary with a real redis-server: ACL users split enqueueing from changing the cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from kombu.exceptions import OperationalError
from service.conftest import require_redis_server
from service.support import FAST, Deployment, cluster, llm_request, wait_until

from tasks.base.keys import Keys
from tasks.base.settings import Settings
from tasks.edges.client import ServiceClient, Submission
from tasks.edges.localrun import RedisServer, start_redis
from tasks.runtime.acl import USERS, acl_line
from tasks.runtime.celery_app import client_app
from tasks.runtime.task_contract import CLUSTER_EVENT

pytestmark = [pytest.mark.service, pytest.mark.slow]

PASSWORDS = {"service": "service-secret", "control": "control-secret", "submit": "submit-secret"}


@pytest.fixture
def acl_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server with the three gpusched users and the default user off (as ``gpusched acl`` does)."""
    require_redis_server()
    server = start_redis(directory=tmp_path / "redis")
    admin = redis.Redis.from_url(server.url)
    for role, password in PASSWORDS.items():
        _, name, *rules = acl_line(role, password, Keys(None)).split(" ")
        admin.execute_command("ACL", "SETUSER", name, *rules)
    admin.execute_command("ACL", "SETUSER", "default", "off")
    admin.close()
    yield server
    server.stop()


def _as(role: str, url: str, **settings: object) -> Settings:
    return Settings(redis_url=url, redis_username=USERS[role], redis_password=PASSWORDS[role],
                    **{**FAST, **settings})  # type: ignore[arg-type]


def test_a_submitter_can_only_enqueue_requests_and_read_results(
    acl_redis: RedisServer, tmp_path: Path
) -> None:
    """Item 12: the submitter's user cannot queue a cluster event, write the ledger or a stream,
    or run a script; what it pushes onto the requests queue can only be a decision."""
    service = {"redis_username": USERS["service"], "redis_password": PASSWORDS["service"]}
    d = Deployment(acl_redis.url, tmp_path, service)  # workers and this client as the service user
    submitter = ServiceClient(_as("submit", acl_redis.url, submit_via="queue"))
    try:
        d.client.apply_cluster(cluster(4, 2))
        d.start_workers(1)
        placed = submitter.submit(llm_request("from-submitter"), wait=True, timeout=60)
        assert placed["status"] == "scheduled"  # type: ignore[index]
        # the same id with another body: the conflict, read from the record, never the first's result
        other = llm_request("from-submitter", tp=2)
        conflict = submitter.submit(other, wait=True, timeout=60)
        assert isinstance(conflict, Submission) and conflict.status == "conflict", conflict
        assert conflict.stored_digest and conflict.digest and conflict.stored_digest != conflict.digest
        before = d.client.rt.cluster.instance_meta(), d.client.rt.cluster.version()

        denied = submitter.rt.client
        keys = d.keys
        for attempt in (
            lambda: denied.lpush(keys.cluster_queue, "{}"),
            lambda: denied.xadd(keys.events, {"type": "sched.cluster.applied"}),
            lambda: denied.xadd(keys.results, {"request_id": "x"}),
            lambda: denied.hset(keys.capacity, "1:cuda:0", 10**15),
            lambda: denied.hset(keys.request("from-submitter"), "state", "queued"),
            lambda: denied.delete(keys.claims),
            lambda: submitter.rt.cluster.remove_worker(1, "attack"),
            lambda: submitter.cluster_event({"kind": "worker_removed", "worker_id": 1}),
        ):
            with pytest.raises((redis.exceptions.NoPermissionError, OperationalError)) as refused:
                attempt()
            assert "no permissions" in str(refused.value)

        # what the submitter can push is a decision: a cluster event on the requests queue is dead-lettered
        forger = client_app(_as("submit", acl_redis.url, submit_via="queue"))
        forger.send_task(CLUSTER_EVENT, args=({"kind": "worker_removed", "worker_id": 1},),
                         queue=keys.requests_queue)
        wait_until(lambda: d.redis.xlen(keys.deadletter), 60, "the forged message to be dead-lettered")
        ((_, fields),) = d.redis.xrange(keys.deadletter)
        assert (fields["task"], fields["reason"]) == (CLUSTER_EVENT, "wrong_queue")
        assert (d.client.rt.cluster.instance_meta(), d.client.rt.cluster.version()) == before
        forger.close()
    finally:
        submitter.close()
        d.stop()


#: Two partitions on one server, each with its own three users (every password distinct).
PARTITIONS = ("c1", "c2")


def _password(role: str, cluster: str) -> str:
    return f"{cluster}-{role}-secret"


def _load_partition_users(server: RedisServer, tmp_path: Path) -> None:
    """Apply what ``gpusched acl --cluster c1 --cluster c2`` prints (a real CLI process)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSCHED_", "REDIS_"))}
    env |= {f"REDIS_{role.upper()}_PASSWORD_{c.upper()}": _password(role, c)
            for role in USERS for c in PARTITIONS}
    printed = subprocess.run(
        [sys.executable, "-m", "tasks.edges.cli", "acl", *(f"--cluster={c}" for c in PARTITIONS)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    admin = redis.Redis.from_url(server.url)
    lines = [line.split(" ") for line in printed.splitlines()]
    assert lines[0] == ["user", "default", "off"] and len(lines) == 1 + len(USERS) * len(PARTITIONS)
    for _, name, *rules in [*lines[1:], lines[0]]:  # the admin's own user last
        admin.execute_command("ACL", "SETUSER", name, *rules)
    admin.close()


def _partition(server: RedisServer, tmp_path: Path, cluster: str, role: str) -> Deployment:
    credentials = {"cluster": cluster, "redis_username": f"gpusched-{cluster}-{role}",
                   "redis_password": _password(role, cluster)}
    (tmp_path / cluster).mkdir(exist_ok=True)
    return Deployment(server.url, tmp_path / cluster, credentials)


def _foreign_commands(theirs: Keys) -> list[tuple[str, ...]]:
    """Commands on another partition's keys, queues and channels, and listing every key."""
    return [
        ("GET", theirs.generation), ("HGETALL", theirs.request("placed-c2")),
        ("XRANGE", theirs.results, "-", "+"),
        ("XADD", theirs.results, "*", "request_id", "x"), ("HSET", theirs.capacity, "1:cuda:0", "1"),
        ("DEL", theirs.claims), ("LPUSH", theirs.requests_queue, "{}"), ("LPUSH", theirs.cluster_queue, "{}"),
        ("RPOP", theirs.requests_queue), ("SMEMBERS", f"_kombu.binding.{theirs.requests_queue}"),
        ("DEL", f"_kombu.binding_permanent.{theirs.requests_queue}"), ("HGETALL", theirs.unacked),
        ("EVAL", "return redis.call('GET', KEYS[1])", "1", theirs.version),
        ("PUBLISH", f"/0.{theirs.event_exchange}/worker.heartbeat", "{}"),
        ("KEYS", "*"), ("SCAN", "0"), ("RANDOMKEY",),
    ]


def test_partitions_on_one_server_cannot_reach_each_other(tmp_path: Path) -> None:
    """Issue 17, item 4: ACL rules are server-wide, so databases never isolated two deployments;
    each partition's users (``gpusched acl --cluster``) reach only its key patterns. Both
    partitions run real workers as their own service users; every user of c1 is refused
    every command on c2's keys, queues and channels, and cannot list keys."""
    require_redis_server()
    server = start_redis(directory=tmp_path / "redis")
    deployments: list[Deployment] = []
    try:
        _load_partition_users(server, tmp_path)
        for name in PARTITIONS:
            d = _partition(server, tmp_path, name, "service")
            deployments.append(d)
            d.start_workers(1)
            d.client.apply_cluster(cluster(2, 2))
            placed = d.client.submit(llm_request(f"placed-{name}"), wait=True, timeout=60)
            assert placed["status"] == "scheduled", placed  # type: ignore[index]
        control = _partition(server, tmp_path, "c1", "control")
        deployments.append(control)
        assert control.client.cancel("placed-c1")["status"] == "released"  # its own partition: allowed
        theirs = Keys("c2")
        for role in USERS:
            user = redis.Redis(port=server.port, username=f"gpusched-c1-{role}",
                               password=_password(role, "c1"), decode_responses=True)
            for command in _foreign_commands(theirs):
                with pytest.raises(redis.exceptions.NoPermissionError):
                    user.execute_command(*command)
            user.close()
        intruder = ServiceClient(_as_partition("c2", "c1", server))  # c1's service user, aimed at c2
        with pytest.raises(redis.exceptions.NoPermissionError):
            intruder.submit(llm_request("intruder"))
        intruder.close()
        c2 = deployments[1]
        assert c2.outcomes()["placed-c2"] == {"terminal": 1, "scheduled": 1}
        assert c2.client.rt.records.record("intruder") == {}
    finally:
        for d in deployments:
            d.stop()
        server.stop()


def _as_partition(target: str, owner: str, server: RedisServer) -> Settings:
    return Settings(redis_url=server.url, cluster=target, redis_username=f"gpusched-{owner}-service",
                    redis_password=_password("service", owner), **FAST)  # type: ignore[arg-type]
