"""decide → reserve → publish on fakeredis: edge validation, idempotency, conflicts, mirror, replay."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from typing import Any

import pytest
import redis
from builders import GIB, H100, RTX_4090, instance, model, uniform_worker
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kombu.exceptions import OperationalError
from pydantic import ValidationError

from tasks.audit.replay import format_report, replay
from tasks.decision import decide as decide_stage
from tasks.decision.chain_config import ChainConfigError, load_chain, parse_chain
from tasks.decision.core_call import run_core
from tasks.decision.decide import Progress, decide, decide_and_finish
from tasks.decision.notices import OVERCOMMIT_MESSAGE
from tasks.decision.publish import publish
from tasks.decision.reserve import reserve
from tasks.decision.step import Step
from tasks.edges import client as client_module
from tasks.edges.client import ServiceClient, WaitTimeout
from tasks.intake.requests import normalize
from tasks.runtime.context import BLOCK_MARGIN_S, redis_client
from tasks.runtime.settings import Settings
from tasks.state.mirror import ClusterMirror
from tasks.state.scripts import Batch, Scripts
from tasks.testing import Harness, booking_violations, isolated_settings

SMALL = {"GPUSTACK_MODEL_VRAM_CLAIM": str(10 * GIB)}


def _request(rid: str, **fields: Any) -> dict[str, Any]:
    return {"request_id": rid, "model": model(**{"env": SMALL, **fields})}


def _cluster(workers: int = 2, gpus: int = 2) -> dict[str, Any]:
    return {
        "workers": [uniform_worker(w, f"w{w}", gpus, RTX_4090) for w in range(1, workers + 1)],
        "model_instances": [],
    }


# ---------------------------------------------------------------------- edge
def _submit_and_decide(h: Harness, request_id: str) -> Step | None:
    """Submit a request and run the decide step of its queued message (task id "t")."""
    h.submit(_request(request_id))
    item = h.queue.popleft()
    return decide(h.rt, item.request_id, item.seq, item.attempt, "t")


def test_invalid_requests_are_rejected_at_the_edge_naming_the_field() -> None:
    h = Harness()
    bad = h.submit({"request_id": "bad", "model": {"name": "m", "replicas": -1}})
    assert bad.status == "rejected" and bad.result is not None
    assert bad.result["error"]["field"] == "model.replicas"
    assert h.queue == deque_empty()
    assert [(r["request_id"], r["status"], r["terminal"]) for r in h.results()] == [("bad", "rejected", "1")]
    assert h.events(["sched.request.rejected"])[0].data["error"]["field"] == "model.replicas"
    assert h.submit({"request_id": "bad", "model": {"name": "m", "replicas": -1}}).status == "duplicate"


def deque_empty() -> Any:
    from collections import deque

    return deque()


def test_non_object_requests_are_rejected_with_a_digest_id() -> None:
    normalized = normalize(["not", "a", "request"])
    assert normalized.rejection is not None and normalized.request_id.startswith("req-")
    assert normalized.rejection.status == "rejected"


def test_ids_are_generated_from_content_and_inline_cluster_rows_are_ignored() -> None:
    raw = {"model": model(), "workers": [uniform_worker(1, "w", 1, RTX_4090)]}
    first, second = normalize(raw), normalize(dict(raw))
    assert first.request_id == second.request_id
    assert "workers" not in json.loads(first.request_json)


def test_the_same_request_id_yields_one_decision() -> None:
    h = Harness()
    h.apply(_cluster())
    assert h.submit(_request("r")).status == "accepted"
    assert h.submit(_request("r")).status == "duplicate"
    assert len(h.queue) == 1
    h.pump()
    assert len(h.events(["sched.decision.made"])) == 1 and len(h.results()) == 1


def test_core_rejections_flow_through_the_pipeline() -> None:
    h = Harness()
    h.apply(_cluster())
    h.submit(_request("r", backend_parameters=["--tp-size", "0"]))
    h.pump()
    (result,) = h.results()
    assert result["status"] == "rejected"
    assert json.loads(result["result"])["error"]["field"] == "model.backend_parameters"


def test_a_raw_request_on_the_queue_is_accepted_and_decided() -> None:
    h = Harness()
    h.apply(_cluster())
    step = decide(h.rt, _request("raw"), 0, 0, "task-1")
    assert step is not None and step.action == "publish"  # booked inside the decide lease
    assert decide(h.rt, _request("raw"), 0, 0, "task-2") is None  # another message, same id
    assert h.events(["sched.request.duplicate"])
    rejected = decide(h.rt, {"request_id": "x", "model": {"backend": "vLLM"}}, 0, 0, "t")
    assert rejected is None and h.results()[-1]["status"] == "rejected"


def test_stale_and_superseded_messages_do_nothing() -> None:
    h = Harness()
    h.apply(_cluster())
    h.submit(_request("r"))
    assert decide(h.rt, "r", 0, 5, "t") is None
    assert decide(h.rt, "unknown", 0, 0, "t") is None
    h.pump()
    assert decide(h.rt, "r", 0, 0, "t") is None  # already done
    assert len(h.results()) == 1


def test_decisions_are_deterministic_and_recorded_with_their_inputs() -> None:
    digests = []
    for _ in range(2):
        h = Harness()
        h.apply(_cluster())
        h.submit(_request("r"))
        h.pump()
        (decision,) = h.events(["sched.decision.made"])
        digests.append((decision.data["result_digest"], decision.data["inputs_digest"]))
        assert decision.cluster_version == 1 and decision.data["chain"]["name"] == "gpustack-default"
        assert decision.data["outcome"]["selected_candidate"]["worker_name"] == "w1"
        assert json.loads(h.results()[0]["result"])["request_id"] == "r"
    assert digests[0] == digests[1]


# ------------------------------------------------------------------ conflicts
def _decide_two_on_one_snapshot(h: Harness) -> tuple[Step, Step]:
    h.submit(_request("a"))
    h.submit(_request("b"))
    items = [h.queue.popleft(), h.queue.popleft()]
    steps = [decide(h.rt, i.request_id, i.seq, i.attempt, "t") for i in items]
    assert steps[0] is not None and steps[1] is not None
    return steps[0], steps[1]


def test_the_decide_lease_books_inside_the_decision() -> None:
    h = Harness()
    h.apply(_cluster(workers=1, gpus=2))
    step = _submit_and_decide(h, "a")
    assert step is not None and step.action == "publish"
    assert h.record("a")["state"] == "booked"
    assert h.rt.client.exists(h.rt.keys.decide_lock) == 0  # released


def test_a_conflicting_reservation_retries_with_a_fresh_snapshot() -> None:
    h = Harness(settings=isolated_settings(decide_lock=False))
    h.apply(_cluster(workers=1, gpus=2))
    first, second = _decide_two_on_one_snapshot(h)
    assert first.booking == {**first.booking, "claims": second.booking["claims"]}  # type: ignore[index]
    assert reserve(h.rt, first) is not None
    assert reserve(h.rt, second) is None  # conflict: a retry was queued
    (retry,) = list(h.queue)
    assert (retry.request_id, retry.seq, retry.attempt) == ("b", 0, 1)
    assert 0 <= retry.countdown <= h.settings.max_countdown_s
    watchdog = h.rt.partition.now_ms() + int(h.settings.stuck_after_s * 1000)
    assert h.rt.client.zrange(h.rt.keys.outbox, 0, -1, withscores=True) == [
        ("a|0|0", pytest.approx(watchdog, abs=1000)),
        ("b|0|1", watchdog),
    ]
    publish(h.rt, first)
    h.pump()
    assert sorted(r["status"] for r in h.results()) == ["scheduled", "scheduled"]
    assert h.rt.client.zcard(h.rt.keys.outbox) == 0  # nothing in flight, no watchdog left
    booked = {m.request_id: m for m in h.rt.cluster.instance_meta().values()}
    claims = h.rt.cluster.claims()
    assert set(claims[f"req:{booked['a'].request_id}"]) != set(claims["req:b"])


def test_a_lost_decision_message_is_sent_again_by_the_watchdog() -> None:
    h = Harness()
    h.apply(_cluster())
    h.submit(_request("r"))
    h.queue.clear()  # the message vanished (e.g. popped by a consumer as Redis died)
    h.clock.advance(h.settings.stuck_after_s - 1)
    h.drain()
    assert not h.queue
    h.clock.advance(2)
    assert h.drain()["enqueued"] == 1
    h.pump()
    assert [r["status"] for r in h.results()] == ["scheduled"]
    assert h.rt.client.zcard(h.rt.keys.outbox) == 0


def test_a_lost_publish_step_is_resumed_by_the_watchdog() -> None:
    h = Harness(settings=isolated_settings(decide_lock=False))
    h.apply(_cluster())
    step = _submit_and_decide(h, "r")
    assert step is not None and reserve(h.rt, step) is not None  # publish never runs
    h.clock.advance(h.settings.stuck_after_s + 1)
    h.drain()
    assert [s["action"] for s in h.resumed] == ["publish"]
    assert [r["status"] for r in h.results()] == ["scheduled"]
    h.clock.advance(h.settings.stuck_after_s + 1)
    assert h.drain() == {"enqueued": 0, "followups": 0, "timers": 0}


def test_exhausted_conflicts_park_quietly_and_retry_on_a_timer() -> None:
    h = Harness(
        settings=isolated_settings(conflict_max_attempts=1, conflict_retry_after_s=2, decide_lock=False)
    )
    h.apply(_cluster(workers=1, gpus=2))
    first, second = _decide_two_on_one_snapshot(h)
    publish(h.rt, reserve(h.rt, first))  # type: ignore[arg-type]
    parked_step = reserve(h.rt, second)
    assert parked_step is not None and parked_step.reasons == ["conflict_retries_exhausted"]
    assert publish(h.rt, parked_step) == "parked"
    assert [r["status"] for r in h.results()] == ["scheduled"]  # no unschedulable notice
    h.clock.advance(2)
    h.drain()
    h.pump()
    assert [r["status"] for r in h.results()] == ["scheduled", "scheduled"]


def test_overcommitted_manual_picks_are_never_booked() -> None:
    h = Harness()
    busy = instance(7, 1, {0: RTX_4090 - GIB})
    h.apply({"workers": [uniform_worker(1, "w1", 1, RTX_4090)], "model_instances": [busy]})
    h.submit({"request_id": "m", "model": model(gpu_selector={"gpu_ids": ["w1:cuda:0"]})})
    h.pump()
    (notice,) = h.results()
    assert notice["status"] == "unschedulable"
    assert OVERCOMMIT_MESSAGE in json.loads(notice["result"])["messages"]
    assert h.rt.cluster.ledger()[1] == {"1:cuda:0": RTX_4090 - GIB}


# --------------------------------------------------------------------- mirror
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["submit", "delete", "down", "up", "add", "remove"]), max_size=14))
def test_the_incremental_mirror_equals_a_fresh_read(ops: list[str]) -> None:
    h = Harness()
    h.apply(_cluster(workers=3, gpus=2))
    mirror = h.rt.mirror
    for n, op in enumerate(ops):
        _apply_op(h, op, n)
        h.pump()
        incremental = mirror.sync()
        fresh = ClusterMirror(h.rt.cluster).reload()
        assert incremental.version == fresh.version
        assert _dumped(incremental.worker_list()) == _dumped(fresh.worker_list())
        assert list(incremental.instances) == list(fresh.instances)
        assert _dumped(incremental.instance_list()) == _dumped(fresh.instance_list())


@pytest.mark.parametrize("then", ["nothing", "a_new_change", "more_changes_than_were_lost"])
def test_the_mirror_reloads_when_redis_went_back_in_time(then: str) -> None:
    """An AOF that lost its tail: the mirror must not keep the lost bookings."""
    h = Harness()
    h.apply(_cluster(workers=2, gpus=2))
    h.rt.mirror.sync()
    saved = {key: h.rt.client.dump(key) for key in h.rt.client.keys("*")}
    for n in range(3):
        h.submit(_request(f"r{n}"))
    h.pump()
    assert h.rt.mirror.sync().instances  # the process saw the bookings
    changes = {"nothing": 0, "a_new_change": 1, "more_changes_than_were_lost": 5}[then]
    _restore_and_change(h, saved, changes)  # a new timeline; past the lost versions, the version looks fine
    _assert_the_prefetched_sync_matches_a_fresh_read(h)


def _restore_and_change(h: Harness, saved: dict[Any, Any], changes: int) -> None:
    """Put Redis back to the dumped keys, then record ``changes`` worker state flips."""
    h.rt.client.flushall()
    for key, value in saved.items():
        h.rt.client.restore(key, 0, value)
    for n in range(changes):
        h.event({"kind": "worker_state", "worker_id": 2, "state": "not_ready" if n % 2 == 0 else "ready"})


def _assert_the_prefetched_sync_matches_a_fresh_read(h: Harness) -> None:
    """The decide path's sync (version and changes read in a batch) equals a full read, with no instance."""
    batch = h.rt.partition.batch()
    read = h.rt.mirror.read_changes(batch)
    batch.execute()
    assert read is not None
    synced = h.rt.mirror.sync(read.value)
    fresh = ClusterMirror(h.rt.cluster).reload()
    assert synced.version == fresh.version
    assert list(synced.instances) == list(fresh.instances) == []
    assert _dumped(synced.worker_list()) == _dumped(fresh.worker_list())


def _dumped(rows: list[Any]) -> list[dict[str, Any]]:
    """Field values only (the core memoises private views on the objects it has seen)."""
    return [row.model_dump() for row in rows]


def _apply_op(h: Harness, op: str, n: int) -> None:
    wid = 1 + n % 3
    if op == "submit":
        h.submit(_request(f"r{n}"))
    elif op == "delete":
        h.event({"kind": "instance_deleted", "request_id": f"r{n - 1}"})
    elif op in ("down", "up"):
        state = "unreachable" if op == "down" else "ready"
        h.event({"kind": "worker_state", "worker_id": wid, "state": state})
    elif op == "add":
        h.event({"kind": "worker_added", "worker": uniform_worker(10 + n, f"x{n}", 1, RTX_4090)})
    else:
        h.event({"kind": "worker_removed", "worker_id": wid})


# --------------------------------------------------------------------- replay
def _busy_history() -> Harness:
    h = Harness()
    h.apply(_cluster(workers=2, gpus=2))
    for n in range(6):
        h.submit(_request(f"r{n}"))
    h.pump()
    h.event({"kind": "instance_deleted", "request_id": "r0"})
    h.event({"kind": "worker_added", "worker": uniform_worker(3, "w3", 1, RTX_4090)})
    h.pump()
    h.event({"kind": "worker_removed", "worker_id": 1})
    h.pump()
    return h


def test_replay_of_a_whole_history_is_identical() -> None:
    h = _busy_history()
    report = replay(h.rt.client, h.rt.cluster)
    assert report.replayed == len(h.events(["sched.decision.made"])) > 6
    assert (report.differ, report.skipped) == (0, [])
    expected = f"{report.replayed} replayed, {report.replayed} identical, 0 differ"
    assert format_report(report).splitlines()[0] == expected


def test_replay_filters_by_request_and_position() -> None:
    h = _busy_history()
    assert replay(h.rt.client, h.rt.cluster, request_id="r5").replayed == 2
    decisions = h.events(["sched.decision.made"])
    since = replay(h.rt.client, h.rt.cluster, since=decisions[-2].stream_id)
    assert since.replayed == 2 and since.identical == 2


def test_replay_reports_a_tampered_decision_with_a_diff() -> None:
    h = _busy_history()
    target = h.events(["sched.decision.made"])[0]
    data = dict(target.data)
    data["result_digest"] = "0" * 64
    data["outcome"] = {**data["outcome"], "selected": 99}
    h.rt.client.xadd(
        h.rt.keys.events,
        {
            "schema_version": "1",
            "type": "sched.decision.made",
            "event_id": "forged",
            "time": target.time,
            "source": "test",
            "request_id": target.request_id or "",
            "cluster_version": str(target.cluster_version),
            "data": json.dumps(data),
        },
    )
    report = replay(h.rt.client, h.rt.cluster)
    assert report.differ == 1
    assert any(line.startswith("-") and "99" in line for line in report.differences[0].diff)
    assert "1 differ" in format_report(report).splitlines()[0]


def test_replay_skips_decisions_whose_snapshot_is_gone() -> None:
    h = _busy_history()
    for key in h.rt.client.keys(h.rt.keys.snapshot("*")):
        h.rt.client.delete(key)
    report = replay(h.rt.client, h.rt.cluster)
    assert report.replayed == 0 and report.skipped


# ------------------------------------------------------------ chain, settings
def test_chain_config_selects_and_orders_plugins(tmp_path: Any) -> None:
    loaded = parse_chain(
        {
            "filters": [{"name": "status"}, {"name": "labels", "enabled": False}],
            "strategies": [{"name": "single_worker_single_gpu"}],
            "scorer": "binpack",
        }
    )
    assert [f.name for f in loaded.chain.filters] == ["status"]
    assert [s.name for s in loaded.chain.strategies] == ["single_worker_single_gpu"]
    assert loaded.placement_override == "binpack"
    assert load_chain(tmp_path / "missing.json").spec.name == "gpustack-default"
    for bad, where in [
        ({"filters": [{"name": "nope"}]}, "filters"),
        ({"strategies": [{"name": "single_worker_single_gpu"}] * 2}, "strategies"),
        ({"strategies": [{"name": "single_worker_single_gpu", "enabled": False}]}, "strategies"),
        ({"scorer": "random"}, "scorer"),
    ]:
        with pytest.raises(ChainConfigError, match=where):
            parse_chain(bad)


def test_the_configured_scorer_overrides_the_models_placement_strategy() -> None:
    h = Harness(chain=parse_chain({"scorer": "binpack"}))
    h.apply(_cluster())
    h.submit(_request("r"))
    h.pump()
    assert h.events(["sched.decision.made"])[0].data["chain"]["scorer"] == "binpack"


def test_settings_refuse_timings_that_cause_duplicate_execution() -> None:
    with pytest.raises(ValidationError, match="visibility_timeout"):
        Settings(visibility_timeout_s=60, task_time_limit_s=60, task_soft_time_limit_s=30)
    with pytest.raises(ValidationError, match="max_countdown_s"):
        Settings(visibility_timeout_s=10, task_time_limit_s=5, task_soft_time_limit_s=4, max_countdown_s=6)
    with pytest.raises(ValidationError, match="cluster id"):
        Settings(cluster="bad id")


def test_settings_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSCHED_REDIS_URL", "redis://example:6390/3")
    monkeypatch.setenv("GPUSCHED_CLUSTER", "c1")
    loaded = Settings()
    assert (loaded.redis_url, loaded.cluster) == ("redis://example:6390/3", "c1")


def test_cluster_partitions_hash_tag_every_key() -> None:
    h = Harness(settings=isolated_settings(cluster="c1"))
    h.apply(_cluster())
    h.submit(_request("r"))
    h.pump()
    keys = h.rt.client.keys("*")
    assert keys and all(key.startswith("gpusched:{c1}:") for key in keys)
    assert h.rt.keys.requests_queue == "gpusched.{c1}.requests"


# ------------------------------------------------- one decision per attempt
def test_a_duplicate_decision_of_one_attempt_continues_with_the_recorded_one() -> None:
    h = Harness(settings=isolated_settings(decide_lock=False))
    h.apply({"workers": [uniform_worker(1, "w1", 1, RTX_4090)], "model_instances": []})
    h.submit(_request("a"))
    h.queue.clear()
    first = decide(h.rt, "a", 0, 0, "task-A")
    # the cluster changes, then the same attempt is delivered again (redelivery, re-drive)
    h.event({"kind": "worker_added", "worker": uniform_worker(2, "w2", 1, H100)})
    h.event({"kind": "worker_state", "worker_id": 1, "state": "not_ready"})
    second = decide(h.rt, "a", 0, 0, "task-B")
    assert first is not None and second is not None
    assert second.to_dict() == first.to_dict()  # not a second decision on the new cluster
    assert len(h.events(["sched.decision.made"])) == 1
    for step in (reserve(h.rt, first), reserve(h.rt, second)):
        assert step is not None and publish(h.rt, step) in ("published", "duplicate")
    (result,) = h.results()
    assert json.loads(result["result"])["candidates"][0]["worker_name"] == "w1"
    assert booking_violations(h.rt) == []


def test_steps_of_another_decision_cannot_book_publish_or_park() -> None:
    h = Harness(settings=isolated_settings(decide_lock=False))
    h.apply(_cluster())
    step = _submit_and_decide(h, "a")
    assert step is not None and step.action == "reserve"
    forged = Step.from_dict({**step.to_dict(), "result_digest": "0" * 64})
    assert reserve(h.rt, forged) is None  # stale: not the recorded decision
    assert h.rt.cluster.ledger()[1] == {}
    forged.action = "publish"
    assert publish(h.rt, forged) == "stale"
    booked = reserve(h.rt, step)
    assert booked is not None and h.record("a")["state"] == "booked"
    parking = Step.from_dict({**step.to_dict(), "action": "park", "reasons": ["x"]})
    assert publish(h.rt, parking) == "stale"  # a booked request never parks
    assert h.rt.parked.entries() == {} and h.results() == []
    assert publish(h.rt, booked) == "published"


def test_a_redelivered_decision_that_had_booked_resumes_its_publish_at_once() -> None:
    h = Harness()
    h.apply(_cluster())
    h.submit(_request("r"))
    item = h.queue.popleft()
    decide(h.rt, item.request_id, item.seq, item.attempt, "t")  # booked; then killed
    assert h.record("r")["state"] == "booked"
    again = decide(h.rt, item.request_id, item.seq, item.attempt, "t")  # redelivered
    assert again is not None and again.action == "publish"
    assert publish(h.rt, again) == "published"  # no wait for the watchdog
    assert [r["status"] for r in h.results()] == ["scheduled"]


class _Interleaving:
    """Runs pipeline steps one at a time, so a test can interleave them with anything."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.delivered: list[Any] = []
        self.to_reserve: list[Step] = []
        self.to_publish: list[Step] = []

    def decide(self, n: int, *, again: bool) -> None:
        pool = deque(self.delivered[-3:]) if again else self.h.queue  # again: a duplicate delivery
        if pool:
            item = pool.popleft()
            self.delivered.append(item)
            step = decide(self.h.rt, item.request_id, item.seq, item.attempt, f"t{n}")
            if step is not None:
                (self.to_reserve if step.action == "reserve" else self.to_publish).append(step)

    def reserve(self) -> None:
        if self.to_reserve:
            reserved = reserve(self.h.rt, self.to_reserve.pop(0))
            if reserved is not None:
                self.to_publish.append(reserved)

    def publish(self) -> None:
        if self.to_publish:
            publish(self.h.rt, self.to_publish.pop(0))

    def finish(self) -> None:
        while self.to_reserve or self.to_publish:
            self.reserve()
            self.publish()
        self.h.pump()


def _cluster_change(h: Harness, op: str, n: int) -> None:
    if op == "grow":
        h.event({"kind": "worker_added", "worker": uniform_worker(10 + n, f"x{n}", 1, H100)})
    elif op in ("down", "up"):
        state = "not_ready" if op == "down" else "ready"
        h.event({"kind": "worker_state", "worker_id": 1 + n % 2, "state": state})
    elif op == "free" and h.rt.cluster.instance_meta():
        h.event({"kind": "instance_deleted", "instance_key": sorted(h.rt.cluster.instance_meta())[0]})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.sampled_from(
            ["submit", "decide", "redeliver", "reserve", "publish", "grow", "down", "up", "free"]
        ),
        min_size=4,
        max_size=24,
    ),
    st.booleans(),
)
@example(  # a decision, then the cluster changes and the same attempt is delivered again
    ["submit", "decide", "grow", "publish", "down", "redeliver", "reserve", "reserve", "publish", "publish"],
    False,
)
def test_what_is_published_is_what_is_booked(ops: list[str], lease: bool) -> None:
    """Steps of any decision interleave with duplicates and cluster changes; published == booked."""
    h = Harness(settings=isolated_settings(decide_lock=lease))
    h.apply(_cluster(workers=2, gpus=1))
    run = _Interleaving(h)
    for n, op in enumerate(ops):
        if op == "submit":
            h.submit(_request(f"r{n}"))
        elif op in ("decide", "redeliver"):
            run.decide(n, again=op == "redeliver")
        elif op == "reserve":
            run.reserve()
        elif op == "publish":
            run.publish()
        else:
            _cluster_change(h, op, n)
        assert booking_violations(h.rt) == []
    run.finish()
    assert booking_violations(h.rt) == []
    terminal = [f["request_id"] for f in h.results() if f["terminal"] == "1"]
    assert len(terminal) == len(set(terminal))


def test_client_wait_returns_only_published_results() -> None:
    h = Harness(settings=isolated_settings(decide_lock=False))
    h.apply(
        {
            "workers": [uniform_worker(1, "w1", 1, RTX_4090)],
            "model_instances": [instance(7, 1, {0: RTX_4090 - GIB})],
        }
    )
    h.submit(_request("a"))
    h.pump()
    client = ServiceClient.__new__(ServiceClient)
    client.rt = h.rt
    notice = client.stored_result("a")
    assert notice is not None and notice["status"] == "unschedulable"
    h.event({"kind": "instance_deleted", "instance_id": 7})
    item = h.queue.popleft()
    decide(h.rt, item.request_id, item.seq, item.attempt, "t")  # decided, not published
    assert h.record("a")["state"] == "decided"
    assert client.stored_result("a") == notice  # the published notice, not the new decision
    assert client.stored_result("a", terminal=True) is None
    h.pump()
    h.queue.append(item)
    h.pump()
    final = client.stored_result("a", terminal=True)
    assert final is not None and final["status"] == "scheduled"


# ---------------------------------------------------------------- watchdog
def test_the_watchdog_backs_off_and_logs_every_redrive() -> None:
    h = Harness()
    h.apply(_cluster())
    h.submit(_request("r"))  # its message waits in a long queue backlog
    period = h.settings.stuck_after_s
    for _ in range(2):
        h.clock.advance(period + 1)
        h.drain()
    assert len(h.queue) == 2  # one re-drive, not one per period
    h.clock.advance(2 * period)
    h.drain()
    assert len(h.queue) == 3
    redriven = h.events(["sched.request.redriven"])
    assert [e.data["redrives"] for e in redriven] == [1, 2]
    assert redriven[1].data["next_due_ms"] - h.rt.partition.now_ms() == 4 * period * 1000
    h.pump()  # every copy of the message: one decision, one result
    assert len(h.events(["sched.decision.made"])) == 1
    assert [r["status"] for r in h.results()] == ["scheduled"]
    assert h.rt.client.zcard(h.rt.keys.outbox) == 0


def test_an_accepted_request_whose_message_cannot_be_sent_is_still_driven() -> None:
    h = Harness()
    h.apply(_cluster())
    sent = h.rt.dispatch

    def broker_down(*args: Any) -> None:
        raise OperationalError("broker unreachable")

    h.rt.dispatch = broker_down
    assert h.submit(_request("r")).status == "accepted"  # recorded: not an error for the caller
    h.rt.dispatch = sent
    assert not h.queue
    h.clock.advance(h.settings.outbox_lease_s + 1)
    assert h.drain()["enqueued"] == 1
    h.pump()
    assert [r["status"] for r in h.results()] == ["scheduled"]


def test_the_module_level_submit_takes_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    class Recording:
        def submit(self, request: Any, **kwargs: Any) -> dict[str, Any]:
            seen.update(kwargs)
            return {"status": "scheduled"}

    monkeypatch.setattr(client_module, "default_client", Recording)
    assert client_module.submit({"request_id": "r"}, wait=True, terminal=True) == {"status": "scheduled"}
    assert seen == {"wait": True, "timeout": 30.0, "terminal": True}


def test_edge_rejections_log_the_received_request() -> None:
    h = Harness()
    h.submit({"request_id": "bad", "model": {"name": "m", "replicas": -1}})
    assert [e.type for e in h.events()] == [
        "sched.request.received",
        "sched.request.rejected",
        "sched.result.published",
    ]
    received = h.events(["sched.request.received"])[0]
    assert received.request_id == "bad" and received.data["request"]["model"]["replicas"] == -1


# ---------------------------------------------------------------- runtime
def test_each_thread_gets_its_own_runtime() -> None:
    from tasks.runtime.context import get_runtime, reset_runtime

    def noop(*_: Any) -> None:
        return None

    mine = get_runtime(noop, noop)
    assert get_runtime(noop, noop) is mine
    other: list[Any] = []
    thread = threading.Thread(target=lambda: other.append(get_runtime(noop, noop)))
    thread.start()
    thread.join()
    assert other[0] is not mine and other[0].mirror is not mine.mirror
    reset_runtime()
    assert get_runtime(noop, noop) is not mine
    reset_runtime()


def test_a_half_open_connection_cannot_hang_wait() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(listener.accept()[0]), daemon=True).start()
    h = Harness()
    client = ServiceClient.__new__(ServiceClient)
    client.rt = h.rt
    settings_ = isolated_settings(redis_url=f"redis://127.0.0.1:{listener.getsockname()[1]}/0")
    client._blocking = redis_client(settings_, blocking=True, max_block_ms=200)  # never answers
    started = time.monotonic()
    with pytest.raises(WaitTimeout):
        client.wait("r", timeout=1.0)
    assert time.monotonic() - started < 1.0 + 0.2 + BLOCK_MARGIN_S + 1.0
    client._blocking.close()
    for sock in (*accepted, listener):
        sock.close()


def test_replay_uses_the_request_as_received_before_each_decision() -> None:
    h = Harness()
    h.apply(_cluster(workers=1, gpus=2))
    h.submit(_request("r"))
    h.pump()
    h.event({"kind": "instance_deleted", "request_id": "r"})
    h.rt.client.delete(h.rt.keys.request("r"))  # request_ttl_s elapsed: the id is free again
    h.submit(_request("r", env={"GPUSTACK_MODEL_VRAM_CLAIM": str(12 * GIB)}))
    h.pump()
    report = replay(h.rt.client, h.rt.cluster)
    assert (report.replayed, report.identical, report.differ) == (2, 2, 0)


# ------------------------------------------- one message, one round trip per step
def _count_round_trips(h: Harness, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every batch and every single script call the runtime sends."""
    sent: list[str] = []
    real_execute, real_run = Batch.execute, Scripts.run

    def execute(self: Batch) -> None:
        sent.append("batch")
        real_execute(self)

    def run(self: Scripts, name: str, keys: list[str], args: list[Any]) -> Any:
        sent.append(name)
        return real_run(self, name, keys, args)

    monkeypatch.setattr(Batch, "execute", execute)
    monkeypatch.setattr(Scripts, "run", run)
    return sent


def test_under_the_lease_the_decide_message_books_and_publishes_in_two_round_trips(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Harness()
    h.apply(_cluster())
    h.submit(_request("a"))
    item = h.queue.popleft()
    sent = _count_round_trips(h, monkeypatch)
    progress = decide_and_finish(h.rt, item.request_id, item.seq, item.attempt, "t")
    assert progress == Progress(None, "published")
    assert sent == ["batch", "batch"]  # lease + begin + changes; record + reserve + release + publish
    assert [r["status"] for r in h.results()] == ["scheduled"]
    assert h.record("a")["state"] == "done" and booking_violations(h.rt) == []
    assert h.rt.client.exists(h.rt.keys.decide_lock) == 0  # released with the booking


def test_a_redelivered_decide_after_an_inline_publish_publishes_nothing_twice() -> None:
    h = Harness()
    h.apply(_cluster())
    h.submit(_request("a"))
    item = h.queue.popleft()
    first = decide_and_finish(h.rt, item.request_id, item.seq, item.attempt, "t1")
    again = decide_and_finish(h.rt, item.request_id, item.seq, item.attempt, "t1")
    other = decide_and_finish(h.rt, item.request_id, item.seq, item.attempt, "t2")
    assert first.outcome == "published"
    assert again == other == Progress(None)
    assert len(h.results()) == 1 and len(h.events(["sched.decision.made"])) == 1
    assert len(h.events(["sched.reservation.booked"])) == 1


def test_a_decide_redelivered_after_booking_publishes_the_booking_inline() -> None:
    h = Harness()
    h.apply(_cluster())
    h.submit(_request("a"))
    item = h.queue.popleft()
    decide(h.rt, item.request_id, item.seq, item.attempt, "t")  # booked; then killed
    progress = decide_and_finish(h.rt, item.request_id, item.seq, item.attempt, "t")
    assert progress == Progress(None, "published")
    assert [r["status"] for r in h.results()] == ["scheduled"] and booking_violations(h.rt) == []


def test_a_batched_publish_after_a_conflicting_reservation_publishes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Harness(settings=isolated_settings(decide_lock=False))
    h.apply(_cluster(workers=1, gpus=1))
    h.submit(_request("a"))
    h.submit(_request("b"))
    a, b = h.queue.popleft(), h.queue.popleft()
    real_core = run_core

    def core_then_rival_books(*args: Any, **kwargs: Any) -> Any:
        decided = real_core(*args, **kwargs)
        if args[2] == "a":  # b books the only GPU between a's snapshot and a's batch
            rival = decide_and_finish(h.rt, b.request_id, b.seq, b.attempt, "tb")
            assert rival.outcome == "published"
        return decided

    monkeypatch.setattr(decide_stage, "run_core", core_then_rival_books)
    assert decide_and_finish(h.rt, a.request_id, a.seq, a.attempt, "ta") == Progress(None)
    assert [r["request_id"] for r in h.results()] == ["b"]  # a's publish refused on its own
    assert h.record("a")["state"] == "retrying"
    assert [(i.request_id, i.attempt) for i in h.queue] == [("a", 1)]  # its retry is queued
    assert booking_violations(h.rt) == []


def test_batches_survive_a_flushed_script_cache() -> None:
    h = Harness()
    h.apply(_cluster())
    h.submit(_request("a"))
    h.pump()
    h.rt.client.script_flush()  # e.g. Redis restarted: every EVALSHA answers NOSCRIPT
    h.submit(_request("b"))
    assert h.pump() == 1
    assert sorted(r["request_id"] for r in h.results()) == ["a", "b"]


def test_a_busy_decide_lease_is_waited_for() -> None:
    h = Harness(settings=isolated_settings(decide_lock_wait_s=2.0))
    h.apply(_cluster())
    h.rt.client.set(h.rt.keys.decide_lock, "another-decider", px=150)  # its holder died
    h.submit(_request("a"))
    started = time.monotonic()
    h.pump()
    assert 0.1 < time.monotonic() - started < 1.0  # taken once it expired, not after the full wait
    assert [r["status"] for r in h.results()] == ["scheduled"]
    assert h.rt.client.exists(h.rt.keys.decide_lock) == 0


def test_a_decide_lease_not_obtained_in_time_proceeds_optimistically() -> None:
    h = Harness(settings=isolated_settings(decide_lock_wait_s=0.1))
    h.apply(_cluster())
    h.rt.client.set(h.rt.keys.decide_lock, "another-decider", px=60_000)
    h.submit(_request("b"))
    h.pump()
    assert [r["status"] for r in h.results()] == ["scheduled"]
    assert h.rt.client.get(h.rt.keys.decide_lock) == "another-decider"  # only its holder releases it


def _one_queued_decision(**settings: Any) -> tuple[Harness, Any]:
    """A harness with one submitted request and its dispatched decision taken off the queue."""
    h = Harness(settings=isolated_settings(**settings))
    h.apply(_cluster())
    h.submit(_request("a"))
    return h, h.queue.popleft()


def test_a_decide_lease_whose_acquiring_reply_was_lost_is_still_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """redis-py re-sends a pipeline whose reply was lost: the repeated SET NX meets the own token."""
    h, item = _one_queued_decision(decide_lock_wait_s=1.0)
    real_send = Batch._send
    sends: list[int] = []

    def reply_lost_once(self: Batch, todo: Any) -> list[Any]:
        sends.append(len(todo))
        if len(sends) == 1:
            real_send(self, todo)  # executed by the server, then the connection reset
        return real_send(self, todo)

    monkeypatch.setattr(Batch, "_send", reply_lost_once)
    started = time.monotonic()
    progress = decide_and_finish(h.rt, item.request_id, item.seq, item.attempt, "t")
    assert time.monotonic() - started < 0.5  # not waiting for its own lease
    assert progress == Progress(None, "published")
    assert h.rt.client.exists(h.rt.keys.decide_lock) == 0  # released with the booking


def test_a_decide_lease_taken_in_a_round_trip_that_then_failed_is_released(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h, item = _one_queued_decision(decide_lock_wait_s=1.0)
    h.rt.client.script_flush()  # Redis restarted: begin answers NOSCRIPT after the SET NX took the lease
    real_send = Batch._send
    sends: list[int] = []

    def reset_on_resend(self: Batch, todo: Any) -> list[Any]:
        sends.append(len(todo))
        if len(sends) == 2:
            raise redis.ConnectionError("connection reset")  # the re-send after loading begin
        return real_send(self, todo)

    monkeypatch.setattr(Batch, "_send", reset_on_resend)
    with pytest.raises(redis.ConnectionError):
        decide_and_finish(h.rt, item.request_id, item.seq, item.attempt, "t")
    assert h.rt.client.exists(h.rt.keys.decide_lock) == 0  # not left to its TTL
    monkeypatch.undo()
    started = time.monotonic()
    progress = decide_and_finish(h.rt, item.request_id, item.seq, item.attempt, "t")
    assert time.monotonic() - started < 0.5 and progress == Progress(None, "published")


def test_the_mirror_reloads_when_the_new_timeline_sorts_before_its_position(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A failover to a replica whose clock is behind: new changes get ids below the mirror's position."""
    import fakeredis.model._stream as fake_stream

    real_time = fake_stream.time
    h = Harness()
    h.apply(_cluster(workers=2, gpus=2))
    h.rt.mirror.sync()
    saved = {key: h.rt.client.dump(key) for key in h.rt.client.keys("*")}
    ahead = type("Clock", (), {"time": staticmethod(lambda: real_time.time() + 3600)})
    monkeypatch.setattr(fake_stream, "time", ahead)  # the old primary's clock ran an hour ahead
    for n in range(3):
        h.submit(_request(f"r{n}"))
    h.pump()
    assert h.rt.mirror.sync().instances
    monkeypatch.setattr(fake_stream, "time", real_time)
    _restore_and_change(h, saved, 5)  # more changes than were lost: the version alone looks fine
    _assert_the_prefetched_sync_matches_a_fresh_read(h)
