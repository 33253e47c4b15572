"""Deep requests without a ``request_id`` (real redis-server, real worker, the installed CLI and
a foreign Celery client): each gets the id its content gives and its own rejection naming its
field. They all shared ``req-unhashable`` before: the second was answered ``conflict`` and its
own fault was never reported, for as long as the first one's stub lived."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from service.raw_messages import nested
from service.support import Deployment, cluster, llm_request, wait_until

pytestmark = pytest.mark.service

GPUSCHED = str(Path(sys.executable).with_name("gpusched"))
MESSAGE = "nests more than 64 levels deep"


def _without_id(rid: str, **model_fields: Any) -> dict[str, Any]:
    request = llm_request(rid, **model_fields)
    del request["request_id"]
    return request


def _digest_id(request: dict[str, Any]) -> str:
    """docs/service.md's rule with the standard library (100 levels is within its reach)."""
    text = json.dumps(request, sort_keys=True, separators=(",", ":"))
    return "req-" + hashlib.sha256(text.encode()).hexdigest()[:24]


def test_deep_requests_without_id_are_each_rejected_on_their_own_field(
    deployment: Callable[..., Deployment], tmp_path: Path
) -> None:
    d = deployment()
    d.start_workers(1)
    d.client.apply_cluster(cluster(1, 2))
    base = llm_request("x")["model"]["hf_config"]
    in_config = _without_id("a", hf_config={**base, "rope_scaling": nested(100)})
    in_env = _without_id("b", env={"A": nested(100)})
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")}, **d.env}

    def submit(name: str, document: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(document))
        return subprocess.run([GPUSCHED, "submit", str(path)], env=env, capture_output=True, text=True,
                              timeout=60, check=False, cwd=tmp_path)

    for name, document, field in (("config", in_config, "model.hf_config"), ("env", in_env, "model.env")):
        done = submit(name, document)
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert field in done.stderr and MESSAGE in done.stderr and "conflict" not in done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
        request_id = _digest_id(document)
        result = d.client.wait(request_id, timeout=30)
        assert (result["status"], result["error"]) == (
            "rejected", {"code": "invalid_request", "message": MESSAGE, "field": field})
        stored = d.redis.hget(d.keys.request(request_id), "request")
        assert stored is not None and json.loads(stored)["invalid"] == f"{field}: {MESSAGE}"
    again = submit("config-again", in_config)  # the same request under the same id: a duplicate
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {"request_id": _digest_id(in_config), "status": "duplicate",
                                        "state": "done"}

    # the worker's door: raw messages from another Celery client, without an id either
    foreign = Celery("control-plane", broker=d.url, set_as_current=False)
    try:
        for document in (in_config, in_env, _without_id("c", env={"A": nested(200)})):
            foreign.send_task("gpusched.decide", args=[document], queue=d.keys.requests_queue)
    finally:
        foreign.close()
    letters = wait_until(lambda: len(found := d.redis.xrange(d.keys.deadletter)) >= 3 and found,
                         90, "three dead letters")
    ids = [fields["request_id"] for _, fields in letters]
    assert len(set(ids)) == 3 and all(i.startswith("req-") and len(i) == 28 for i in ids), ids
    fields = [d.client.wait(i, timeout=30)["error"]["field"] for i in ids]
    assert fields == ["model.hf_config", "model.env", "model.env"]
