"""Local model folders: read only under the configured model roots, never blocking a worker
(real redis-server, real worker processes; both doors: the client and a raw Celery message)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from service.support import Deployment, cluster, llm_request

from tasks.decision.replay import replay
from tasks.edges.client import ServiceClient

pytestmark = pytest.mark.service

OUTSIDE = "is not inside a model root of this service (model_roots)"


def _local_request(rid: str, folder: Path | str) -> dict[str, Any]:
    """A request whose model is read from a local folder (no inline config, no weight size)."""
    request = llm_request(rid)
    model = request["model"]
    del model["hf_config"], model["weight_bytes"]
    model["local_path"] = str(folder)
    return request


def _model_folder(folder: Path) -> Path:
    """A Qwen2.5-7B folder: its config.json and the index's declared weight size."""
    folder.mkdir(parents=True)
    config = llm_request("x")["model"]["hf_config"]
    (folder / "config.json").write_text(json.dumps(config))
    index = {"metadata": {"total_size": 15_231_233_024}, "weight_map": {}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def test_local_paths_outside_the_roots_are_rejected_alike_and_a_fifo_blocks_nothing(
    deployment: Callable[..., Deployment], tmp_path: Path
) -> None:
    roots = tmp_path / "models"
    _model_folder(roots / "qwen")
    fifo_folder = roots / "fifo"
    fifo_folder.mkdir()
    os.mkfifo(fifo_folder / "config.json")
    (tmp_path / "secret.txt").write_text("not a model")
    d = deployment(model_roots=[str(roots)])
    d.start_workers(1)
    d.client.apply_cluster(cluster(1, 2))

    outside = {  # exists as a folder, as a file, not at all, and an escape through ".."
        "out-dir": tmp_path, "out-file": tmp_path / "secret.txt", "out-missing": tmp_path / "nothing",
        "out-dots": f"{roots}/../secret.txt",
    }
    answers = {rid: d.client.submit(_local_request(rid, path), wait=True, timeout=60)
               for rid, path in outside.items()}
    foreign = Celery("control-plane", broker=d.url, set_as_current=False)
    try:  # the worker's own door: a raw request on the queue
        for rid, path in outside.items():
            foreign.send_task("gpusched.decide", args=[_local_request(f"raw-{rid}", path)],
                              queue=d.keys.requests_queue)
        foreign.send_task("gpusched.decide", args=[_local_request("raw-fifo", fifo_folder)],
                          queue=d.keys.requests_queue)
        foreign.send_task("gpusched.decide", args=[_local_request("raw-qwen", roots / "qwen")],
                          queue=d.keys.requests_queue)
    finally:
        foreign.close()
    answers |= {f"raw-{rid}": d.client.wait(f"raw-{rid}", timeout=60) for rid in outside}

    expected = ("rejected", {"code": "invalid_request", "message": OUTSIDE, "field": "model.local_path"})
    errors = {rid: (result["status"], result["error"]) for rid, result in answers.items()}
    assert errors == dict.fromkeys(answers, expected)
    fifo = d.client.wait("raw-fifo", timeout=60)
    assert fifo["status"] == "rejected" and fifo["error"]["field"] == "model.local_path"
    assert "not a regular file" in fifo["error"]["message"]
    placed = d.client.wait("raw-qwen", timeout=60)
    assert placed["status"] == "scheduled"
    assert placed["estimate"]["weight_source"] == "safetensors_index"


def test_a_worker_reads_local_paths_only_inside_its_own_roots_whatever_the_submitter_allowed(
    deployment: Callable[..., Deployment], tmp_path: Path
) -> None:
    roots = tmp_path / "models"
    qwen = _model_folder(roots / "qwen")
    (roots / "secret.txt").write_text("not a model")
    d = deployment(model_roots=[str(roots)])  # the in-process client (the submitter) allows roots
    d.start_workers(1, env={"GPUSCHED_MODEL_ROOTS": "[]"})  # the worker reads no local folders
    d.client.apply_cluster(cluster(1, 2))

    inside_the_clients_roots = {  # a model folder, a file and nothing: the client's intake lets all pass
        "folder": qwen, "file": roots / "secret.txt", "missing": roots / "nothing",
    }
    answers = {rid: d.client.submit(_local_request(rid, path), wait=True, timeout=60)
               for rid, path in inside_the_clients_roots.items()}
    lora = llm_request("lora")
    lora["model"]["lora_list"] = [{"name": "adapter", "local_path": str(qwen)}]
    answers["lora"] = d.client.submit(lora, wait=True, timeout=60)

    none = "this service reads no local model folders (model_roots is empty)"
    expected = {rid: ("rejected", {"code": "invalid_request", "message": none, "field": "model.local_path"})
                for rid in inside_the_clients_roots}
    expected["lora"] = ("rejected", {"code": "invalid_request", "message": none,
                                     "field": "model.lora_list.0.local_path"})
    assert {rid: (r["status"], r["error"]) for rid, r in answers.items()} == expected  # type: ignore[index]
    # the worker's roots are recorded with each such decision: replay refuses the same way
    report = replay(d.client.rt.client, d.client.rt.cluster)
    assert report.replayed >= len(expected) and report.identical == report.replayed, report


def test_a_booking_of_a_local_model_survives_export_and_recovery_by_a_cli_without_roots(
    deployment: Callable[..., Deployment], tmp_path: Path
) -> None:
    roots = tmp_path / "models"
    qwen = _model_folder(roots / "qwen")
    d = deployment(model_roots=[str(roots)])
    d.start_workers(1)
    d.client.apply_cluster(cluster(1, 2))
    request = _local_request("local", qwen)
    assert d.client.submit(request, wait=True, timeout=60)["status"] == "scheduled"  # type: ignore[index]
    for worker in d.workers:  # nothing decides while Redis is wiped and recovered
        worker.stop()

    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")}, **d.env,
           "GPUSCHED_MODEL_ROOTS": "[]"}  # the operator's CLI: no model roots of its own
    exported = subprocess.run([sys.executable, "-m", "tasks.edges.cli", "cluster", "export"], env=env,
                              capture_output=True, text=True, timeout=120, check=False)
    assert exported.returncode == 0, exported.stderr
    backup = tmp_path / "backup.json"
    backup.write_text(exported.stdout)
    bookings = json.loads(exported.stdout)["bookings"]
    assert [b["request"]["model"]["local_path"] for b in bookings] == [str(qwen)]
    claims = d.client.rt.cluster.claims()
    d.redis.flushdb()

    command = [sys.executable, "-m", "tasks.edges.cli", "cluster", "apply", str(backup), "--recover"]
    recovered = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert recovered.returncode == 0, recovered.stderr
    assert json.loads(recovered.stdout)["bookings"] == 1
    assert d.client.rt.cluster.claims() == claims  # the booking holds the same GPU memory again
    fresh = ServiceClient(d.settings)  # d.client remembers the generation the wipe lost
    try:
        assert fresh.submit(request).status == "duplicate"  # type: ignore[union-attr]
    finally:
        fresh.close()
