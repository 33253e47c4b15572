"""Worker filters: GPUStack's order, messages, and the stop-at-empty rule."""

from __future__ import annotations

from builders import RTX_4090, model, request, uniform_worker

from scheduler_core import schedule


def test_filter_messages_and_state_message_when_no_worker_is_ready():
    """Rule: ClusterFilter → GPU selector → labels → READY; chain stops when empty; GPUStack state text."""
    workers = [
        uniform_worker(1, "a", 1, RTX_4090, labels={"gpu": "4090"}, state="not_ready"),
        uniform_worker(2, "b", 1, RTX_4090, labels={"gpu": "4090"}, state="unreachable"),
        uniform_worker(3, "c", 1, RTX_4090, labels={"gpu": "h100"}),
        uniform_worker(4, "d", 1, RTX_4090, cluster_id=2),
    ]
    result = schedule(request(model(worker_selector={"gpu": "4090"}), workers))
    assert result.status == "unschedulable"
    assert result.filter_messages == [
        "Matched 3 workers by cluster selector.",
        "Matched 2/3 workers by label selector: {'gpu': '4090'}.",
        "Matched 0/2 workers by READY status.",
    ]
    block = (
        "- Matched 3 workers by cluster selector.\n"
        "- Matched 2/3 workers by label selector: {'gpu': '4090'}.\n"
        "- Matched 0/2 workers by READY status.\n"
    )
    assert result.messages == [block]
    assert result.state_message == "No suitable workers.\nDetails:\n" + block
    assert result.candidates == [] and result.estimate is None
    assert result.blocked_by == "worker_not_ready"


def test_gpu_selector_filter_reports_missing_workers():
    """Rule: GPUMatchingFilter keeps named workers and lists the missing ones."""
    selector = {"gpu_ids": ["gone:cuda:0", "a:cuda:0", "other:cuda:1"], "gpus_per_replica": 1}
    result = schedule(request(model(gpu_selector=selector), [uniform_worker(1, "a", 1, RTX_4090)]))
    assert result.filter_messages[1] == "Matched 1 worker by gpu selector. Missing workers: gone, other."
    assert result.status == "scheduled"


def test_cluster_filter_always_runs_and_null_cluster_matches_only_null():
    """Rule: ClusterFilter compares cluster ids even when the model has none (None == None only);
    the READY line appears only when the status filter removed a worker."""
    in_cluster = uniform_worker(1, "a", 1, RTX_4090, cluster_id=7)
    result = schedule(request(model(cluster_id=None), [in_cluster]))
    assert result.filter_messages == ["Matched 0 workers by cluster selector."]
    assert result.status == "unschedulable" and result.blocked_by == "cluster_mismatch"
    free = uniform_worker(2, "b", 1, RTX_4090, cluster_id=None)
    result = schedule(request(model(cluster_id=None), [in_cluster, free]))
    assert result.filter_messages == ["Matched 1 worker by cluster selector."]
    assert result.status == "scheduled"
