"""What the bridge accepts from GPUStack, and the ids and bodies it derives (no server needed)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tasks.edges.gpustack_bridge import writeback
from tasks.edges.gpustack_bridge.api import BadResponse, GpustackApi, HttpStatus, WatchEvent
from tasks.edges.gpustack_bridge.follow import Mirror
from tasks.edges.gpustack_bridge.ids import base_request_id, instance_of, request_id
from tasks.edges.gpustack_bridge.rows import RowRefused, instance_row, model_row, worker_row

GIB = 1 << 30


def _worker(**extra: Any) -> dict[str, Any]:
    return {
        "id": 3,
        "name": "h100-a",
        "ip": "10.0.0.3",
        "ifname": "eth0",
        "port": 10150,
        "cluster_id": 1,
        "labels": {"gpu": "h100"},
        "state": "ready",
        "system_reserved": {"ram": 0, "vram": 0},
        "heartbeat_time": "2026-12-01T00:00:00Z",
        "status": {
            "memory": {"total": 512 * GIB, "used": 3 * GIB, "utilization_rate": 1.0},
            "gpu_devices": [
                {
                    "type": "cuda",
                    "index": 0,
                    "vendor": "nvidia",
                    "name": "H100",
                    "memory": {"total": 80 * GIB, "used": 5, "allocated": 7},
                    "temperature": 40,
                }
            ],
        },
        **extra,
    }


def test_a_worker_row_keeps_what_placement_reads_and_drops_what_every_heartbeat_changes() -> None:
    reduced = worker_row(_worker())
    assert "heartbeat_time" not in reduced
    assert reduced["status"] == {
        "memory": {"total": 512 * GIB},
        "gpu_devices": [
            {"type": "cuda", "index": 0, "vendor": "nvidia", "name": "H100", "memory": {"total": 80 * GIB}}
        ],
    }
    busier = _worker(heartbeat_time="2026-12-01T00:01:00Z")
    busier["status"]["gpu_devices"][0]["memory"]["used"] = 60 * GIB
    assert worker_row(busier) == reduced  # a status post that changes nothing placement reads


@pytest.mark.parametrize(
    ("row", "field"),
    [
        (_worker(id=-1), "id"),
        (_worker(id=True), "id"),
        (_worker(id=1 << 63), "id"),
        (_worker(name="a;b:cuda"), "workers.0.name"),
        (
            _worker(status={"gpu_devices": [{"type": "x;2:cuda", "index": 0, "memory": {"total": 1}}]}),
            "workers.0.status.gpu_devices.0.type",
        ),
        (_worker(state="exploded"), "workers.0.state"),
        ("not a row", "id"),
    ],
)
def test_a_worker_row_that_is_not_valid_is_refused_naming_the_field(row: Any, field: str) -> None:
    with pytest.raises(RowRefused) as refused:
        worker_row(row)
    assert refused.value.field == field


def test_instance_and_model_rows_are_validated() -> None:
    good = {"id": 5, "name": "qwen-abcde", "model_id": 2, "worker_id": None, "state": "pending"}
    assert instance_row(good)["name"] == "qwen-abcde"
    with pytest.raises(RowRefused) as refused:
        instance_row({**good, "name": ""})
    assert refused.value.field == "name"
    with pytest.raises(RowRefused) as refused:
        instance_row({**good, "worker_id": 1, "worker_name": "a:b", "gpu_type": "cuda", "gpu_indexes": [0]})
    assert refused.value.field.endswith("worker_name")
    with pytest.raises(RowRefused):
        model_row({"id": 2, "name": "m", "backend_parameters": "not a list"})


def test_the_request_id_is_the_same_for_a_listed_and_a_watched_row_and_new_for_a_recreated_one() -> None:
    listed = {"id": 9, "name": "qwen-x7k2p", "created_at": "2026-12-01T22:15:05.123000Z"}
    watched = {"id": 9, "name": "qwen-x7k2p", "created_at": "2026-12-01T22:15:05.123Z"}
    rid = request_id(1, listed)
    assert rid == request_id(1, watched)  # the watch formats created_at otherwise (failed before)
    assert rid != request_id(1, {"id": 10, "name": "qwen-q1w2e"})  # ModelController's re-created replica
    assert rid != request_id(1, {"id": 9, "name": "qwen-zzzzz"})  # a database that reused the id
    assert instance_of(rid, 1) == 9 and instance_of(f"{rid}~2", 1) == 9
    assert instance_of(rid, 2) is None and instance_of("req-abc", 1) is None
    assert base_request_id(f"{rid}~3") == rid


def test_a_replayed_row_older_than_the_listed_one_is_skipped() -> None:
    mirror = Mirror()
    new = {
        "id": 5,
        "name": "m-a",
        "state": "running",
        "worker_id": None,
        "updated_at": "2026-12-01T10:00:05Z",
    }
    mirror.resync("model-instances", [new])
    old = WatchEvent(1, {**new, "state": "pending", "updated_at": "2026-12-01T10:00:01"}, {})
    assert mirror.apply("model-instances", old) is None
    assert mirror.rows["model-instances"][5]["state"] == "running"
    change = mirror.apply("model-instances", WatchEvent(3, {"id": 5}, {}))
    assert change is not None and change.after is None and 5 not in mirror.rows["model-instances"]


def _result() -> dict[str, Any]:
    claim = {"vram": {"1": 70, "0": 70}, "ram": None, "vram_utilization": 0.85}
    sub = {
        "worker_id": 4,
        "worker_name": "b",
        "worker_ip": "10.0.0.4",
        "total_gpus": 2,
        "gpu_type": "cuda",
        "gpu_indexes": [0, 1],
        "computed_resource_claim": claim,
    }
    return {
        "status": "scheduled",
        "selected": 0,
        "candidates": [
            {
                "worker_id": 3,
                "worker_name": "a",
                "worker_ip": "10.0.0.3",
                "gpu_type": "cuda",
                "gpu_indexes": [0, 1],
                "computed_resource_claim": {**claim, "vram_utilization": None, "estimated_vram": 9},
                "subordinate_workers": [sub],
            }
        ],
    }


def test_a_placement_is_written_as_gpustacks_scheduler_writes_it_and_read_back_as_the_same() -> None:
    row = {
        "id": 5,
        "name": "m-a",
        "model_name": "m",
        "source": "local_path",
        "local_path": "/models/m",
        "state": "pending",
    }
    workers = {3: {"ifname": "eth0", "advertise_address": "a.example"}, 4: {"ifname": "eth1"}}
    body = writeback.placement_body(row, _result(), workers, "SGLang")
    assert body["state"] == "scheduled" and body["state_message"] == ""
    assert (body["worker_ifname"], body["worker_advertise_address"]) == ("eth0", "a.example")
    assert body["distributed_servers"]["mode"] == "initialize_later"
    assert body["distributed_servers"]["subordinate_workers"][0]["worker_ifname"] == "eth1"
    assert "estimated_vram" not in body["computed_resource_claim"]  # GPUStack's claim has no such field
    assert {k: body[k] for k in ("source", "local_path", "name", "model_name")} == {
        "source": "local_path",
        "local_path": "/models/m",
        "name": "m-a",
        "model_name": "m",
    }
    echoed = {**row, **body}  # what GPUStack's row holds after the PUT
    assert writeback.placement_of_row(echoed) == writeback.placement_of_result(_result())


def test_an_unschedulable_result_keeps_gpustacks_text() -> None:
    result = {"status": "unschedulable", "state_message": None, "messages": ["- a\n", "- b"]}
    assert writeback.state_message_of(result) == "No suitable workers.\nDetails:\n- a\n- b"
    body = writeback.unschedulable_body({"name": "m-a", "source": "local_path", "local_path": "/m"}, result)
    assert body["state"] == "pending" and body["state_message"].startswith("No suitable workers.")


def test_the_client_refuses_what_is_not_json_and_bounds_error_bodies() -> None:
    with pytest.raises(ValueError):
        GpustackApi("ftp://gpustack", None)
    status = HttpStatus("PUT", "/v2/model-instances/1", 422, "x" * 10_000)
    assert not status.retryable and len(status.body) == 300
    assert HttpStatus("PUT", "/x", 503, "").retryable and HttpStatus("PUT", "/x", 409, "").retryable
    with pytest.raises(BadResponse):
        GpustackApi._event(b"[" * 100_000, "workers")
    assert GpustackApi._event(json.dumps({"type": "1", "data": {}}).encode(), "workers") is None
    assert GpustackApi._event(json.dumps({"type": 2, "data": {"id": 1}}).encode(), "workers") == WatchEvent(
        2, {"id": 1}, {}
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ([], "missing --server, --cluster-id, --mode"),
        (["--server", "ftp://gpustack", "--cluster-id", "1", "--mode", "place"], "http:// or https://"),
        (["--server", "http://127.0.0.1:1", "--cluster-id", "0", "--mode", "place"], "must be above 0"),
        (["--server", "http://127.0.0.1:1", "--cluster-id", "1", "--mode", "both"], "invalid choice"),
    ],
)
def test_the_command_line_refuses_bad_usage_with_one_line(args: list[str], words: str) -> None:
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {"PATH": "/usr/bin:/bin", "GPUSCHED_GPUSTACK_API_KEY": "gpustack_secret_value"}
    out = subprocess.run(
        [sys.executable, "-m", "tasks.edges.cli", "gpustack", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    [line] = out.stderr.strip().splitlines()
    assert words in line and "gpustack_secret_value" not in line
