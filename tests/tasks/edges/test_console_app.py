"""The console's app on fakeredis (Starlette's TestClient): auth, no secret rendered, escaping, 404s, data."""

from __future__ import annotations

import base64

from service_builders import cluster_of, small_request, worker_row
from starlette.testclient import TestClient

from tasks.edges.console.app import create_app
from tasks.testing import Harness

PAGES = ("/", "/api/map", "/requests", "/api/requests", "/requests/placed", "/api/requests/placed",
         "/workers/1", "/workers/h100-a", "/api/workers/1", "/feed", "/api/replay-status", "/health",
         "/api/health", "/static/console.js", "/static/console.css")


def _harness(**settings: object) -> Harness:
    h = Harness(settings=Harness().settings.model_copy(update=settings))
    h.apply(cluster_of(worker_row(1, "h100-a", 2, labels={"note": "<img src=x onerror=alert(1)>"}),
                       worker_row(2, "b", 1, state="not_ready")))
    h.submit(small_request("placed"))
    h.submit(small_request("parked", worker_selector={"gpu": "nowhere"}))
    h.pump()
    return h


def _auth(user_password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(user_password.encode()).decode()}


def test_every_page_answers_and_nothing_secret_is_rendered() -> None:
    from pydantic import SecretStr

    h = _harness(redis_password=SecretStr("redis-s3cret"), console_basic_auth=SecretStr("ops:hunter2"))
    client = TestClient(create_app(h.rt.settings, h.rt))
    assert client.get("/").status_code == 401
    assert client.get("/", headers=_auth("ops:wrong")).status_code == 401
    assert client.get("/", headers={"Authorization": "Bearer hunter2"}).status_code == 401
    for path in PAGES:
        reply = client.get(path, headers=_auth("ops:hunter2"))
        assert reply.status_code == 200, path
        assert "redis-s3cret" not in reply.text and "hunter2" not in reply.text, path


def test_untrusted_text_is_escaped_and_unknown_ids_are_404() -> None:
    h = _harness()
    client = TestClient(create_app(h.rt.settings, h.rt))
    worker = client.get("/workers/h100-a").text
    assert "&lt;img src=x onerror=alert(1)&gt;" in worker and "<img src=x" not in worker
    assert client.get("/requests/nope").status_code == 404
    assert client.get("/api/requests/nope").status_code == 404
    assert client.get("/workers/999").status_code == 404


def test_the_map_data_indexes_kinds_and_holders() -> None:
    h = _harness()
    client = TestClient(create_app(h.rt.settings, h.rt))
    data = client.get("/api/map").json()
    assert [w["name"] for w in data["workers"]] == ["h100-a", "b"]
    held = [gpu for gpu in data["workers"][0]["gpus"] if gpu[6]]
    assert len(held) == 1
    holder = data["holders"][held[0][6][0][0]]
    assert holder["label"] == "placed" and holder["instance"] == "req:placed"
    assert data["kinds"][held[0][1]] == ["cuda", "GPU"]
    assert data["parked"][0]["reason"] == "label_mismatch"
    listing = client.get("/api/requests?state=parked").json()
    assert [r["request_id"] for r in listing["requests"]] == ["parked"]
    assert client.get("/requests?state=parked&q=park").text.count('data-request="parked"') == 1


def test_the_map_is_rebuilt_only_when_the_cluster_version_moved() -> None:
    import time

    from tasks.edges.console import data

    h = _harness()
    cache = data.MapCache()
    first = cache.get(h.rt)
    assert cache.get(h.rt)["workers"] is first["workers"]  # unchanged version: the same build
    h.submit(small_request("later"))
    h.pump()  # a booking: a new cluster version
    assert cache.get(h.rt)["version"] == first["version"]  # within the rebuild spacing: the last build
    time.sleep(data.MIN_REBUILD_S + 0.05)
    fresh = cache.get(h.rt)
    assert fresh["version"] > first["version"]
    assert {holder["label"] for holder in fresh["holders"]} == {"placed", "later"}
    assert fresh["parked"][0]["reason"] == "label_mismatch"  # read at every call, never cached


def test_the_maps_bytes_are_the_map_and_its_live_parts_read_now() -> None:
    """``/api/map`` sends :meth:`MapCache.encoded`: the build encoded once, spliced with the parked
    queue read at the call — the same JSON as encoding :meth:`MapCache.get` whole."""
    import json

    from tasks.edges.console import data

    h = _harness()
    cache = data.MapCache()
    whole = cache.get(h.rt)
    assert json.loads(cache.encoded(h.rt)) == whole
    h.submit(small_request("waits", worker_selector={"gpu": "none"}))
    h.pump()  # parked: no new cluster version, a new parked entry
    spliced = json.loads(cache.encoded(h.rt))
    assert spliced == cache.get(h.rt) and spliced["workers"] == whole["workers"]
    assert sum(p["count"] for p in spliced["parked"]) == sum(p["count"] for p in whole["parked"]) + 1


def test_a_parked_requests_page_lists_the_workers_each_stage_failed() -> None:
    """30 GiB fits no GPU of h100-a's 2 (nor b, not ready and filtered out): the request page
    lists, per stage and reason, the count and the first workers, linked to their pages."""
    h = _harness()
    h.submit(small_request("huge", env={"GPUSTACK_MODEL_VRAM_CLAIM": str(200 << 30)}))
    h.pump()
    client = TestClient(create_app(h.rt.settings, h.rt))
    page = client.get("/requests/huge").text
    assert 'id="workers-failed"' in page
    row = '<td>single_worker_single_gpu</td><td><code>insufficient_vram</code></td><td class="n">1</td>'
    assert row in page
    assert '<a href="/workers/1">h100-a</a>' in page
    api = client.get("/api/requests/huge").json()
    assert api["why_not"]["workers_failed"][0]["examples"] == [{"id": 1, "name": "h100-a"}]
