"""A plain ``celery -A tasks.app worker`` (no ``--queues``) serves every queue gpusched uses."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from service.support import Deployment, cluster, llm_request, wait_until, worker_row

from tasks.decision.decide import decide
from tasks.intake.requests import normalize
from tasks.runtime.celery_app import TaskSender, client_app

pytestmark = pytest.mark.service


def test_a_plain_celery_worker_consumes_requests_cluster_events_and_resume_steps(
    deployment: Callable[..., Deployment],
) -> None:
    d = deployment()
    d.start_workers(1, plain=True)
    d.client.apply_cluster(cluster(1, 1))

    # gpusched.cluster: a worker joins through the queue (before the fix this queue had no consumer)
    queued = d.client.cluster_event({"kind": "worker_added", "worker": worker_row(2, 1)})
    assert queued["status"] == "queued"
    wait_until(lambda: d.client.rt.cluster.worker_row(2), 60, "worker 2 added by the plain worker")

    # gpusched.requests
    placed = d.client.submit(llm_request("plain-1"), wait=True, timeout=60)
    assert placed["status"] == "scheduled"  # type: ignore[index]

    # gpusched.commits: a decision recorded and booked here, its publish step left to a resume message
    rt = d.client.rt
    request = normalize(llm_request("plain-2"))
    assert rt.records.accept(request.request_id, request.request_json, request.digest).accepted
    step = decide(rt, "plain-2", 0, 0, "test-decider")
    assert step is not None and step.action == "publish" and rt.records.record("plain-2")["state"] == "booked"
    sender_app = client_app(d.settings)
    try:
        TaskSender(sender_app).resume(step.to_dict())
    finally:
        sender_app.close()
    published = d.client.wait("plain-2", timeout=60, terminal=True)
    assert published["status"] == "scheduled"
    d.assert_ledger_consistent()


@pytest.mark.parametrize(("variable", "value", "says"), [
    ("GPUSCHED_UNREACHABLE_GRACE", "5",
     "gpusched: unknown setting in the environment: GPUSCHED_UNREACHABLE_GRACE "
     "(did you mean GPUSCHED_UNREACHABLE_GRACE_S?)\n"),
    ("GPUSCHED_VISIBILITY_TIMEOUT_S", "60",
     "gpusched: invalid setting task_time_limit_s: must stay below visibility_timeout_s\n"),
])
def test_a_plain_celery_worker_with_bad_settings_stops_with_one_line(
    tmp_path: Path, variable: str, value: str, says: str,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")} | {variable: value}
    command = [sys.executable, "-m", "celery", "-A", "tasks.app", "worker", "--loglevel", "INFO"]
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False)
    assert (done.returncode, done.stderr) == (2, says)
