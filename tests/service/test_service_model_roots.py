"""Local model folders: read only under the configured model roots, never blocking a worker
(real redis-server, real worker processes; both doors: the client and a raw Celery message)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from service.support import Deployment, cluster, llm_request

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
