"""``gpusched describe``: status, placement per GPU, the why-not funnel, the timeline."""

from __future__ import annotations

import json

from builders import GIB, RTX_4090
from service_builders import cluster_of, small_request, worker_row

from tasks.edges.describe import describe_request, render_description
from tasks.testing import Harness

TWENTY_GIB = {"GPUSTACK_MODEL_VRAM_CLAIM": str(20 * GIB)}


def _placed_and_parked() -> Harness:
    h = Harness()
    h.apply(cluster_of(worker_row(1, "alpha", count=2), worker_row(2, "beta", labels={"gpu": "x"})))
    h.submit(small_request("placed", env=TWENTY_GIB, backend_parameters=["--tp-size", "2"]))
    h.submit(small_request("nowhere", worker_selector={"gpu": "nowhere"}))
    h.submit(small_request("toobig", env={"GPUSTACK_MODEL_VRAM_CLAIM": str(30 * GIB)}))
    h.pump()
    return h


def test_a_placed_request_shows_one_row_per_gpu_with_its_claim_and_fraction() -> None:
    h = _placed_and_parked()
    info = describe_request(h.rt, "placed")
    assert info is not None
    result = json.loads(h.record("placed")["result"])
    chosen = result["candidates"][result["selected"]]
    fraction = chosen["computed_resource_claim"]["vram_utilization"]
    assert info["status"] == "scheduled" and info["state"] == "done" and info["booking_held"]
    claim = int(RTX_4090 * fraction)  # the fraction's share of each 4090, as GPUStack claims it
    assert [(r["worker"], r["gpu_type"], r["gpu_index"], r["claim_bytes"], r["fraction"])
            for r in info["placement"]] == [
        ("alpha", "cuda", 0, claim, fraction), ("alpha", "cuda", 1, claim, fraction),
    ]
    assert info["placement"][0]["claim_gib"] == round(claim / GIB, 2) and info["why_not"] is None
    assert [e["type"] for e in info["events"]] == [
        "sched.request.received", "sched.decision.made", "sched.reservation.booked", "sched.result.published",
    ]
    text = render_description(info, width=100)
    assert f"alpha (#1)  main  cuda:0  {claim / GIB:9.2f}  {fraction:.4g}" in text
    assert all(len(line) <= 100 for line in text.splitlines())


def test_an_unplaced_request_shows_the_filter_then_the_strategies_with_reason_codes() -> None:
    h = _placed_and_parked()
    label = describe_request(h.rt, "nowhere")
    assert label is not None and label["placement"] == []
    assert label["status"] == "unschedulable" and label["state"] == "parked"
    funnel = label["why_not"]
    assert funnel["blocked_by"] == "label_mismatch" and funnel["parked_reasons"] == ["label_mismatch"]
    assert funnel["filters"] and funnel["strategies"] == []
    big = describe_request(h.rt, "toobig")
    assert big is not None
    reasons = {s["reason"] for s in big["why_not"]["strategies"]}
    assert big["why_not"]["blocked_by"] is None and "insufficient_vram" in reasons
    assert big["why_not"]["parked_reasons"] == ["insufficient_vram"]
    text = render_description(big, width=120)
    assert "Why not placed:" in text and "[insufficient_vram]" in text and "Waiting for:" in text
    assert all(len(line) <= 120 for line in text.splitlines())
    assert "…" not in text.split("Events:")[0]  # the funnel's messages are wrapped, never cut


def test_the_timeline_follows_a_cancel_and_an_unknown_request_is_none() -> None:
    h = _placed_and_parked()
    h.event({"kind": "request_cancelled", "request_id": "placed"})  # releases the placement
    info = describe_request(h.rt, "placed")
    assert info is not None and not info["booking_held"]
    assert [e["type"] for e in info["events"]][-2:] == ["sched.instance.released", "sched.request.cancelled"]
    assert info["events"][-1]["detail"] == "withdrawn by cluster_event (was done)"
    assert describe_request(h.rt, "nosuch") is None


def test_a_rescheduled_request_names_what_it_replaces() -> None:
    h = Harness()
    h.apply(cluster_of(worker_row(1, "a", total=RTX_4090), worker_row(2, "b")))
    h.submit(small_request("r"))
    h.pump()
    moved_from = h.rt.cluster.instance_meta()["req:r"].workers[0]
    h.event({"kind": "worker_removed", "worker_id": moved_from})
    h.pump()
    old, new = describe_request(h.rt, "r"), describe_request(h.rt, "r~1")
    assert old is not None and new is not None
    assert old["moved_to"] == "r~1" and new["reschedule_of"] == "r"
    assert new["events"][0]["detail"].startswith("rescheduled from req:r@")


def test_describe_says_when_the_start_of_the_history_was_trimmed() -> None:
    from service_builders import small_request, uniform_cluster

    from tasks.audit.retention import checkpoint_now, scan, trim
    from tasks.edges.describe import describe_request, render_description
    from tasks.testing import Harness
    h = Harness(settings=Harness().settings.model_copy(update={"audit_checkpoints_kept": 1}))
    h.apply(uniform_cluster(workers=1, gpus=2))
    h.submit(small_request("old"))
    h.pump()
    scan(h.rt)
    checkpoint_now(h.rt)
    h.submit(small_request("new"))
    h.pump()
    assert describe_request(h.rt, "old")["history_trimmed"] is None  # nothing trimmed yet
    removed, _ = trim(h.rt)
    assert removed > 0
    old = describe_request(h.rt, "old")
    assert old["history_trimmed"].startswith("history before ")
    assert "not archived (audit_archive_dir is not set)" in old["history_trimmed"]
    assert "was trimmed behind the audit checkpoint" in render_description(old, width=300)
    assert describe_request(h.rt, "new")["history_trimmed"] is None  # its whole history is still there


def test_a_parked_request_lists_per_reason_how_many_workers_failed_and_which() -> None:
    """``toobig`` (30 GiB) fits no 24 GiB 4090: the one-GPU stage fails alpha and beta, the
    one-worker stage fails alpha (beta has one GPU, so that stage never considers it); the
    same per stage and reason in the JSON, the text and the decision event."""
    h = _placed_and_parked()
    info = describe_request(h.rt, "toobig")
    assert info is not None
    failed = info["why_not"]["workers_failed"]
    by_stage = {(f["stage"], f["reason"]): (f["workers"], [r["name"] for r in f["examples"]])
                for f in failed}
    assert by_stage[("single_worker_single_gpu", "insufficient_vram")] == (2, ["alpha", "beta"])
    assert by_stage[("single_worker_multi_gpu", "insufficient_vram")] == (1, ["alpha"])
    assert json.loads(json.dumps(info))["why_not"]["workers_failed"] == failed  # -o json prints the same
    text = render_description(info, width=120)
    assert "single_worker_single_gpu [insufficient_vram]: 2 (alpha (id 1), beta (id 2))" in text
    decided = [e for e in h.events(["sched.decision.made"]) if e.request_id == "toobig"]
    assert decided and decided[-1].data["outcome"]["failures"] == failed
