"""Anything a queue can hold: junk never stops a worker and never vanishes (real redis-server,
real prefork worker; the bytes are pushed with LPUSH as a hostile client would)."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from fuzzing import base_request, cases, result_problems
from service.fuzz_door import through_raw_door
from service.raw_messages import EMBED, envelope, nested, nested_text
from service.support import Deployment, cluster, llm_request, wait_until

pytestmark = pytest.mark.service

#: Small document limits so that a 100 kB message is over the door's limit
#: (4/3 × 8192 + 64 KiB = 76,459 bytes), while every real message here is far below it.
LIMITS = {"max_request_bytes": 8192, "max_event_bytes": 8192, "max_snapshot_bytes": 8192}


def _junk() -> list[tuple[bytes, str]]:
    """(raw bytes, expected dead-letter reason) in the order they are pushed."""
    deep_request = llm_request("deep-1")
    deep_request["model"]["hf_config"]["rope_scaling"] = nested(900)
    return [
        (b"this is not json", "invalid_json"),
        (bytes(range(256)), "not_utf8"),
        (b'"just a string"', "malformed_envelope"),
        (b"{}", "malformed_envelope"),
        (b'{"__type__": "nope", "__value__": 1}', "invalid_json"),  # kombu's own decoder raises
        (nested_text(5000).encode(), "too_deep"),
        (b"x" * 100_000, "too_large"),
        (envelope(args=[llm_request("yaml-1")], content_type="application/x-yaml"), "content_type"),
        (envelope(body="%%% not base64 %%%"), "invalid_body"),
        (envelope(body=base64.b64encode(b"not json").decode()), "invalid_body"),
        (envelope(task="gpusched.nope", args=[1]), "unknown_task"),
        (envelope(args=[llm_request("headless-1")], drop_headers=True), "unknown_message"),
        (envelope(body_text='{"args": 1}'), "invalid_body"),
        (envelope(args=[nested(900)]), "too_deep"),
        (envelope(args=[deep_request]), "too_deep"),
        (envelope(args=[llm_request("limit-1")], headers={"timelimit": "x"}), "unknown_message"),
        (envelope(args=[llm_request("limit-2")], headers={"timelimit": [None, 10**9]}), "unknown_message"),
        (envelope(body_text=json.dumps([[llm_request("link-1")], {}, {"callbacks": [{"task": "x"}]}])),
         "invalid_body"),
        # past the transport's check, Celery's own refusal: dead-lettered by the consumer's hook
        (envelope(args=[llm_request("eta-1")], headers={"eta": "not a date"}), "invalid_task"),
    ]


def test_junk_on_the_intake_queue_is_dead_lettered_and_the_worker_keeps_consuming(
    deployment: Callable[..., Deployment],
) -> None:
    d = deployment(**LIMITS)
    (worker,) = d.start_workers(1)
    d.client.apply_cluster(cluster(1, 2))
    junk = _junk()
    surrogate = llm_request("surrogate-1")
    surrogate["model"]["name"] = "qwen\ud800"
    for raw, _ in junk:
        d.redis.lpush(d.keys.requests_queue, raw)
    d.redis.lpush(d.keys.requests_queue, envelope(args=[surrogate]))
    d.redis.lpush(d.keys.requests_queue, envelope(args=[llm_request("after-junk")]))

    placed = d.client.wait("after-junk", timeout=90)
    letters = wait_until(
        lambda: (found := d.redis.xrange(d.keys.deadletter)) and len(found) >= len(junk) and found,
        60, "a dead letter per junk message",
    )

    assert worker.process is not None and worker.process.poll() is None, worker.log_tail()
    assert placed["status"] == "scheduled"
    assert [fields["reason"] for _, fields in letters] == [reason for _, reason in junk]
    for _, fields in letters:
        args = json.loads(fields["args"])
        assert args["queue"] == d.keys.requests_queue
        assert len(args["excerpt"].encode()) <= 4 * 512  # 512 bytes, each at most \\xNN
        assert fields["detail"] and "\n" not in fields["detail"]
    # the transport's door sees the raw message; Celery's hooks (the bad ETA) see the decoded body
    assert [json.loads(f["args"])["bytes"] for _, f in letters[:-1]] == [len(raw) for raw, _ in junk[:-1]]
    assert json.loads(letters[-1][1]["args"])["excerpt"].startswith('[[{"request_id": "eta-1"')
    assert json.loads(letters[0][1]["args"])["excerpt"] == "this is not json"
    assert "76459 bytes" in letters[6][1]["detail"]
    named = [bool(fields["task_id"]) for _, fields in letters]  # headers read: the envelopes with headers
    assert named == [False] * 7 + [True] * 4 + [False] + [True] * 7
    deep = d.client.wait("deep-1", timeout=30)
    assert deep["status"] == "rejected"
    assert deep["error"] == {"code": "invalid_request", "message": "nests more than 64 levels deep",
                             "field": "model.hf_config"}
    bad_text = d.client.wait("surrogate-1", timeout=30)
    assert bad_text["status"] == "rejected" and bad_text["error"]["field"] == "model.name"
    assert wait_until(d.idle, 30, "empty queues")
    assert d.outcomes()["deep-1"] == {"terminal": 1, "rejected": 1}


def test_a_far_future_eta_is_dead_lettered_not_held_and_delivered_again(
    deployment: Callable[..., Deployment],
) -> None:
    """A message whose ``eta`` is further ahead than half the visibility timeout would sit
    unacknowledged in the worker's memory and be handed out again by the broker each time
    it outlives the timeout (held before: no dead letter, no result); it is refused at the
    door, and a request sent with a short ``eta`` (the service's own retries) still runs."""
    d = deployment()
    (worker,) = d.start_workers(1)
    d.client.apply_cluster(cluster(1, 2))
    far = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    soon = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    d.redis.lpush(d.keys.requests_queue, envelope(args=[llm_request("eta-far")], headers={"eta": far}))
    d.redis.lpush(d.keys.requests_queue, envelope(args=[llm_request("eta-soon")], headers={"eta": soon}))

    assert d.client.wait("eta-soon", timeout=90)["status"] == "scheduled"
    (letter,) = wait_until(lambda: d.redis.xrange(d.keys.deadletter), 30, "the far-future dead letter")
    fields = letter[1]
    assert fields["reason"] == "unknown_message"
    assert re.match(r"message headers: eta is 86[34]\d\d s ahead, more than \d+ s", fields["detail"])
    assert json.loads(fields["args"])["excerpt"].startswith("{")
    assert worker.process is not None and worker.process.poll() is None, worker.log_tail()


def _poison(rid: str) -> dict[str, object]:
    """Issue 17, item 1: an unknown key that is a lone surrogate, nesting 70 levels deep."""
    request = llm_request(rid)
    request["\ud800"] = nested(70)
    return request


def test_the_surrogate_poison_is_rejected_at_every_door_and_kills_no_worker(
    deployment: Callable[..., Deployment],
) -> None:
    """Before: ``submit()`` raised PydanticSerializationError, and as a raw ``gpusched.decide``
    message the request killed the worker node ("Unrecoverable error"), with no dead letter
    and no result. Now each door rejects it, naming the key as its visible escape."""
    d = deployment()
    (worker,) = d.start_workers(1)
    d.client.apply_cluster(cluster(1, 2))
    submitted = d.client.submit(_poison("poison-client"), wait=True, timeout=30)
    assert isinstance(submitted, dict) and submitted["status"] == "rejected"
    assert submitted["error"] == {"code": "invalid_request", "message": "nests more than 64 levels deep",
                                  "field": "\\ud800"}
    for rid in ("poison-raw-1", "poison-raw-2", "poison-raw-3"):  # one node per message, before
        d.redis.lpush(d.keys.requests_queue, envelope(args=[_poison(rid)]))
    d.redis.lpush(d.keys.requests_queue, envelope(args=[llm_request("after-poison")]))

    assert d.client.wait("after-poison", timeout=60)["status"] == "scheduled"
    for rid in ("poison-raw-1", "poison-raw-2", "poison-raw-3"):
        rejected = d.client.wait(rid, timeout=30)
        assert rejected["error"]["field"] == "\\ud800" and result_problems(json.dumps(rejected)) == []
    letters = d.redis.xrange(d.keys.deadletter)
    assert [fields["reason"] for _, fields in letters] == ["too_deep"] * 3
    assert all("(field \\ud800)" in fields["detail"] for _, fields in letters)
    assert worker.process is not None and worker.process.poll() is None, worker.log_tail()
    assert "Unrecoverable error" not in worker.log_path.read_text()


def test_fuzzed_raw_requests_kill_no_worker_and_each_gets_an_answer(
    deployment: Callable[..., Deployment],
) -> None:
    """A seeded sample of the fuzz (``bench/fuzz_doors.py`` runs 20,000): raw ``gpusched.decide``
    messages with keys and values from the whole Unicode range, wrong types and deep nesting."""
    d = deployment()
    d.start_workers(1)
    d.client.apply_cluster({"workers": base_request("-", cluster=True)["workers"], "model_instances": []})
    report = through_raw_door(d, list(cases(31, 150, cluster=False)), timeout=240)
    assert report.problems == []
    assert report.results >= report.messages - 5  # a result each (a few ids may repeat)


def test_a_forged_decide_for_a_request_in_flight_is_dead_lettered_alone(
    deployment: Callable[..., Deployment],
) -> None:
    """Issue 17, item 2: a forged ``gpusched.decide`` naming another request's id, with the right
    seq and attempt and an unexpected keyword argument, pushed while that request's own message
    is deciding. Before: it raised three times, was dead-lettered as ``task_error`` and finished
    the victim (terminal ``rejected``, ``dead_lettered``). Now it is dead-lettered at once as
    ``invalid_arguments``, finishing nothing, and the victim is placed."""
    d = deployment(decide_lock_wait_s=5)
    d.start_workers(2)
    d.client.apply_cluster(cluster(2, 2))
    d.redis.set(d.keys.decide_lock, "someone-else", px=60_000)  # the victim's decision waits on it
    d.client.submit(llm_request("victim"))
    wait_until(lambda: d.redis.hget(d.keys.request("victim"), "state") == "deciding", 60,
               "the victim's message to claim its attempt")
    forged = json.dumps([["victim", 0, 0], {"bogus": 1}, EMBED])
    d.redis.lpush(d.keys.requests_queue, envelope(body_text=forged))
    (letter,) = wait_until(lambda: d.redis.xrange(d.keys.deadletter), 60, "the forged message's dead letter")
    d.redis.delete(d.keys.decide_lock)

    assert d.client.wait("victim", timeout=60, terminal=True)["status"] == "scheduled"
    fields = letter[1]
    assert (fields["reason"], fields["request_id"], fields["deliveries"]) == ("invalid_arguments", "", "1")
    assert fields["detail"] == "gpusched.decide: unexpected keyword argument 'bogus'"
    wait_until(d.idle, 30, "the pipeline to settle")
    assert d.outcomes()["victim"] == {"terminal": 1, "scheduled": 1}
    assert d.redis.xlen(d.keys.deadletter) == 1
    assert not [e for e in d.events("sched.request.rejected") if e["request_id"] == "victim"]
