"""GPUStack's own selector, timed on the benches' requests, and the pick each side makes.

Runs ``scheduler.find_candidate`` of GPUStack 2.2.3 from PyPI (= 47277d79;
filters, SGLang selector, scorers, pick) in the parity oracle's virtualenv
(``make parity`` builds it at ``.oracle-venv``; ``ORACLE_VENV`` overrides), on
rows already loaded as GPUStack's scheduler holds them, and reports the median
CPU time (``time.process_time``) and the candidate it picked. :func:`pick_of`
reduces a gpusched result to the same shape, so the benches can say whether
both sides chose the same placement.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from scheduler_core import ScheduleResult

ROOT = Path(__file__).resolve().parent.parent
ORACLE = ROOT / "tools" / "gpustack-oracle" / "oracle.py"

#: Runs in the oracle's virtualenv: times find_candidate on prebuilt rows, reports the pick.
_GPUSTACK_TIMER = r'''
import asyncio, json, statistics, sys, time
sys.argv = [sys.argv[0]]
spec = json.load(sys.stdin)
sys.path.insert(0, spec["oracle_dir"])
import oracle as o
o._quiet_environment(False)
engine = o.Oracle()
out = {}
for name, request in spec["requests"].items():
    model, extras, lora = engine.build_model(request["model"])
    workers = [engine.build_worker(w, i) for i, w in enumerate(request["workers"])]
    instances = [engine.build_instance(m, i) for i, m in enumerate(request["model_instances"])]
    samples = []
    with engine.offline(model, extras, lora, request["workers"], []):
        for _ in range(spec["repeat"]):
            start = time.process_time()
            found = engine.sched.find_candidate(engine.config, model, workers, instances)
            candidate, _messages = asyncio.run(found)
            samples.append((time.process_time() - start) * 1000)
    pick = None
    if candidate is not None:
        view = o._candidate_view(candidate)
        pick = [view["worker_id"], view["gpu_type"], view["gpu_indexes"],
                [[s["worker_id"], s["gpu_indexes"]] for s in view["subordinate_workers"] or []]]
    out[name] = {"ms": statistics.median(samples), "pick": pick}
engine.close()
print(json.dumps(out))
'''


def oracle_python() -> Path | None:
    """The oracle virtualenv's interpreter, None when it is not built."""
    venv = Path(os.environ.get("ORACLE_VENV", ROOT / ".oracle-venv"))
    python = venv / "bin" / "python"
    return python if python.exists() else None


def gpustack_times(requests: dict[str, Any], repeat: int) -> dict[str, dict[str, Any]] | None:
    """Per request name: ``ms`` (median CPU time of ``find_candidate``) and ``pick``
    (:func:`pick_of`'s shape, None when GPUStack placed nothing); None without the oracle.

    Raises:
        SystemExit: the timer failed (its stderr's tail is the message).
    """
    python = oracle_python()
    if python is None:
        return None
    spec = {"oracle_dir": str(ORACLE.parent), "requests": requests, "repeat": repeat}
    env = {**os.environ, "PYTHONHASHSEED": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        [str(python), "-c", _GPUSTACK_TIMER], input=json.dumps(spec), capture_output=True, text=True, env=env
    )
    if done.returncode != 0:
        raise SystemExit(f"GPUStack timer failed:\n{done.stderr[-3000:]}")
    result: dict[str, dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def pick_of(result: ScheduleResult) -> list[Any] | None:
    """The selected candidate as ``[worker id, GPU type, GPU indexes, [[subordinate id, indexes], ...]]``."""
    if result.selected is None:
        return None
    chosen = result.candidates[result.selected]
    subordinates = [[sub.worker_id, sub.gpu_indexes] for sub in chosen.subordinate_workers or ()]
    return [chosen.worker_id, chosen.gpu_type, chosen.gpu_indexes, subordinates]
