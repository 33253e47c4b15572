"""The ``gpus_per_replica`` GPUStack's evaluation writes, checked against GPUStack 2.2.3's own
``set_model_gpus_per_replica`` (run in ``.gpustack-venv``, no server), and the fields the bridge
writes back with it."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from scheduler_core import ModelSpec, evaluated_gpus_per_replica
from tasks.edges.gpustack_bridge.evaluate import evaluation
from tests.gpustack_bridge.server import gpustack_venv

pytestmark = [pytest.mark.gpustack]

_IDS = [f"a:cuda:{n}" for n in range(6)] + ["b:cuda:0", "b:cuda:1"]
#: (gpu_ids count, replicas, backend parameters, env, gpus_per_replica already set)
CASES: list[tuple[int, int, list[str], dict[str, str] | None, int | None]] = [
    (3, 1, [], None, None),  # largest power of two ≤ 3
    (8, 1, [], None, None),
    (6, 2, [], None, None),  # 6 ÷ 2 = 3 → 2
    (3, 4, [], None, None),  # fewer GPUs than replicas: 0
    (3, 1, ["--tp-size", "3"], None, None),  # the world size wins
    (8, 2, ["--tp-size", "2", "--pp-size", "2"], None, None),
    (8, 1, ["--tp-size", "2", "--dp-size", "2"], None, None),
    (8, 1, ["--tp-size", "2", "--dp-size", "4", "--enable-dp-attention"], None, None),
    (6, 1, ["--tp-size", "0"], None, None),  # 0 is falsy: the power of two
    (6, 1, ["--tp-size", "-2"], None, None),  # a negative world size: the power of two
    (6, 1, ["--tp-size", "two"], None, None),  # not an integer: unset
    (5, 1, ["--tp=4"], None, None),
    (5, 1, ["--tp-size", "4"], {"GPUSTACK_SKIP_GPU_COUNT_CHECK": "true"}, None),  # 5 ÷ 1
    (6, 2, [], {"GPUSTACK_SKIP_GPU_COUNT_CHECK": "1"}, None),
    (4, 1, [], None, 2),  # already set: unchanged
    (4, 1, [], None, 0),  # 0 counts as unset
    (0, 1, [], None, None),  # no manual selection: nothing
]

_GPUSTACK = """
import json, sys
from gpustack.schemas.models import Model, GPUSelector
from gpustack.scheduler.scheduler import set_model_gpus_per_replica
out = []
for count, replicas, params, env, per_replica in json.load(sys.stdin):
    selector = GPUSelector(gpu_ids=IDS[:count], gpus_per_replica=per_replica) if count else None
    model = Model(name="m", backend="SGLang", replicas=replicas, backend_parameters=params, env=env,
                  gpu_selector=selector)
    changed = set_model_gpus_per_replica(model)
    out.append(model.gpu_selector.gpus_per_replica if changed else None)
print(json.dumps(out))
"""


def _gpustack_answers() -> list[int | None]:
    python = gpustack_venv() / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no GPUStack at {gpustack_venv()} (bash tools/gpustack-server/setup.sh)")
    script = f"IDS = {json.dumps(_IDS)}\n" + _GPUSTACK
    done = subprocess.run([str(python), "-c", script], input=json.dumps(CASES), capture_output=True,
                          text=True, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _model(count: int, replicas: int, params: list[str], env: dict[str, str] | None,
           per_replica: int | None) -> dict[str, Any]:
    selector = {"gpu_ids": _IDS[:count], "gpus_per_replica": per_replica} if count else None
    return {"id": 7, "name": "m", "backend": "SGLang", "replicas": replicas, "backend_parameters": params,
            "env": env, "gpu_selector": selector, "categories": ["llm"]}


def test_gpus_per_replica_is_what_gpustacks_own_evaluation_writes() -> None:
    ours = [evaluated_gpus_per_replica(ModelSpec.model_validate(_model(*case))) for case in CASES]
    assert ours == _gpustack_answers()
    assert ours[:4] == [2, 8, 2, 0]  # by hand: the largest power of two ≤ GPUs ÷ replicas


def test_the_bridge_submits_and_writes_back_only_what_evaluation_changes() -> None:
    empty = _model(3, 1, [], None, None)
    assert evaluation(empty, ()) == {"gpu_selector": {"gpu_ids": _IDS[:3], "gpus_per_replica": 2}}
    assert evaluation(_model(4, 1, [], None, 2), ()) == {}  # set already
    assert evaluation(_model(0, 1, [], None, None), ()) == {}  # not a manual selection
