"""``policy: precise`` through a real worker: what the service decides differently."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from service.support import GIB, Deployment, llm_request, worker_row

pytestmark = pytest.mark.service


def _held(instance_id: int, name: str, gpu: int, amount: int) -> dict[str, object]:
    return {"id": instance_id, "name": name, "model_id": 90 + instance_id, "worker_id": 1,
            "worker_name": "node-0001", "gpu_type": "cuda", "gpu_indexes": [gpu],
            "computed_resource_claim": {"vram": {str(gpu): amount}}}


def test_replaces_that_matches_no_instance_is_rejected_by_the_worker(
    deployment: Callable[..., Deployment],
) -> None:
    """Issue 17, item 7: ``{"id": 999}`` or an id and a name of different rows used to be accepted
    silently; the worker now rejects the request naming ``replaces`` (docs/policy-precise.md)."""
    d = deployment()
    d.start_workers(1)
    held = [_held(5, "qwen-old", 0, 2 * GIB), _held(6, "other", 1, 2 * GIB)]
    d.client.apply_cluster({"workers": [worker_row(1, 2)], "model_instances": held})
    verdicts = {}
    for rid, replaces in (("no-such-id", {"id": 999}), ("crossed", {"id": 5, "name": "other"}),
                          ("matched", {"id": 5, "name": "qwen-old"})):
        request = {**llm_request(rid), "policy": "precise", "replaces": replaces}
        verdicts[rid] = d.client.submit(request, wait=True, timeout=60)
    for rid, named in (("no-such-id", "id 999"), ("crossed", "id 5 and name 'other'")):
        assert verdicts[rid]["status"] == "rejected"
        assert verdicts[rid]["error"] == {"code": "invalid_request", "field": "replaces",
                                          "message": f"matches no instance ({named})"}
    assert verdicts["matched"]["status"] == "scheduled"
    assert d.outcomes()["no-such-id"] == {"terminal": 1, "rejected": 1}
