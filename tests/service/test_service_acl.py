"""The trust boundary with a real redis-server: ACL users split enqueueing from changing the cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from kombu.exceptions import OperationalError
from service.conftest import require_redis_server
from service.support import FAST, Deployment, cluster, llm_request, wait_until

from tasks.edges.client import ServiceClient, Submission
from tasks.edges.localrun import RedisServer, start_redis
from tasks.runtime.acl import USERS, acl_line
from tasks.runtime.celery_app import client_app
from tasks.runtime.settings import Settings
from tasks.runtime.task_contract import CLUSTER_EVENT
from tasks.state.keys import Keys

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
