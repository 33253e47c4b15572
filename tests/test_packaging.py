"""gpusched as users install it: the wheel, in a fresh virtualenv, run from outside the source tree.

The wheel is built from this tree (no build isolation: the test extra brings
setuptools, so no package index is needed) and installed without dependencies
into a new virtualenv whose only other path is the third-party packages of the
development virtualenv (a ``.pth`` line: the development install of gpusched
itself is not visible there). Every command then runs from a temporary folder:
the offline ones on every example, and the service ones against a private
redis-server with a worker started from the fresh virtualenv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

pytestmark = pytest.mark.slow


def _run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(part) for part in command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The ``bin`` folder of a fresh virtualenv with the freshly built wheel installed."""
    work = tmp_path_factory.mktemp("wheel")
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                 "-w", work / "dist", ROOT, cwd=work, env=_clean_env())
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (work / "dist").glob("gpusched-*.whl")
    venv.EnvBuilder(with_pip=True).create(work / "venv")
    bin_dir = work / "venv" / "bin"
    done = _run(bin_dir / "python", "-m", "pip", "install", "--no-deps", "--no-index", wheel, cwd=work,
                env=_clean_env())
    assert done.returncode == 0, done.stderr[-2000:]
    # only now the dependencies (pip must not see the development install while installing)
    purelib = _run(bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                   cwd=work, env=_clean_env()).stdout.strip()
    Path(purelib, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    yield bin_dir


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSCHED_", "PYTHON"))}
    return {**env, **extra}


def test_the_installed_package_is_the_wheel_and_carries_its_data(installed: Path, tmp_path: Path) -> None:
    probe = ("import tasks, scheduler_core, gpusched_configs, importlib.resources as r; "
             "print(tasks.__file__); print(scheduler_core.__file__); "
             "print(sorted(p.name for p in r.files('gpusched_configs').iterdir() "
             "if p.name.endswith('.json')))")
    done = _run(installed / "python", "-c", probe, cwd=tmp_path, env=_clean_env())
    assert done.returncode == 0, done.stderr
    tasks_file, core_file, data = done.stdout.splitlines()
    assert str(installed.parent) in tasks_file and str(installed.parent) in core_file  # not the source tree
    assert json.loads(data.replace("'", '"')) == [
        "chain-precise.json", "chain.json", "diffusion_deployments.json", "diffusion_pipelines.json",
        "gpustack_model_types.json", "service.json",
    ]
    version = _run(installed / "gpusched", "--version", cwd=tmp_path, env=_clean_env())
    assert (version.returncode, version.stdout) == (0, "gpusched 0.1.0\n")


def test_offline_commands_run_every_example_from_another_directory(installed: Path, tmp_path: Path) -> None:
    for example in sorted(EXAMPLES.glob("*.json")):
        done = _run(installed / "gpusched", "schedule", example, cwd=tmp_path, env=_clean_env())
        assert done.returncode == 0, f"{example.name}: {done.stderr}"
        result = json.loads(done.stdout)
        assert result["status"] in ("scheduled", "unschedulable"), example.name
        if "diffusion" in example.name:  # the tuner's catalog comes from the package data
            assert result["launch"]["diffusion"]["pipeline_config_class"], example.name
    tuned = _run(installed / "gpusched", "tune", EXAMPLES / "tune" / "qwen-image.json", cwd=tmp_path,
                 env=_clean_env())
    assert tuned.returncode == 0, tuned.stderr
    assert json.loads(tuned.stdout)["cfg_parallel_degree"] == 2


def test_service_commands_and_a_worker_run_from_another_directory(installed: Path, tmp_path: Path) -> None:
    from service.conftest import require_redis_server

    from tasks.edges.localrun import start_redis

    require_redis_server()
    server = start_redis(directory=tmp_path / "redis")
    env = _clean_env(GPUSCHED_REDIS_URL=server.url, GPUSCHED_LOG_FORMAT="json")
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen([str(installed / "gpusched"), "worker", "--pool", "solo", "--hostname", "w@%h"],
                              cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        applied = _run(installed / "gpusched", "cluster", "apply", EXAMPLES / "service" / "cluster.json",
                       cwd=tmp_path, env=env)
        assert applied.returncode == 0, applied.stderr
        diffusion = json.loads((EXAMPLES / "06-diffusion-qwen-image.json").read_text())
        request = tmp_path / "image.json"
        request.write_text(json.dumps({"request_id": "image-1", "model": diffusion["model"]}))
        placed = _run(installed / "gpusched", "submit", request, "--wait", "--timeout", "120", cwd=tmp_path,
                      env=env)
        assert placed.returncode == 0, placed.stderr + (tmp_path / "worker.log").read_text()[-3000:]
        result = json.loads(placed.stdout)
        assert result["status"] == "scheduled" and result["launch"]["diffusion"]
        replayed = _run(installed / "gpusched", "replay", cwd=tmp_path, env=env)
        assert replayed.returncode == 0 and replayed.stdout.startswith("1 replayed, 1 identical, 0 differ")
    finally:
        worker.terminate()
        worker.wait(30)
        log.close()
        server.remove()
