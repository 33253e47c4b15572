"""A broken ``configs/chain.json`` (or a bad ``precise`` block) stops a worker at start (issue 17, item 5).

Before, the worker logged the error, said "ready", stayed up and consumed
``gpusched.decide`` messages that then failed; the CLI exited 1 ("unexpected
error"). Now ``gpusched worker`` and a plain ``celery -A tasks.app worker``
exit 2 with one line naming the file and the problem, having consumed
nothing, and every CLI command that needs the chain exits 2 the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from service.raw_messages import envelope
from service.support import Deployment, llm_request

pytestmark = pytest.mark.service

#: (file text, what the line must say after the file's name)
BROKEN = {
    "not-json": ('{"filters": [', "Expecting value"),
    "unknown-plugin": (json.dumps({"strategies": [{"name": "single_worker_magic"}]}),
                       "strategies.0: unknown plugin 'single_worker_magic'"),
    "bad-precise": (json.dumps({"precise": {"admission_margin": -1}}),
                    "precise.admission_margin: Input should be greater than or equal to 0"),
    "unknown-precise-knob": (json.dumps({"precise": {"gpu_share": True}}),
                             "precise.gpu_share: Extra inputs are not permitted"),
}


def _environment(d: Deployment, chain: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")}
    return {**base, **d.env, "GPUSCHED_CHAIN_FILE": str(chain), "GPUSCHED_METRICS_PORT": "0",
            "GPUSCHED_LOG_FORMAT": "json"}


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)


def _problem_lines(output: str, chain: Path) -> list[str]:
    prefix = f"gpusched: invalid chain configuration {chain}"
    return [line for line in output.splitlines() if line.startswith(prefix)]


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_worker_with_a_broken_chain_exits_2_at_start_and_consumes_nothing(
    deployment: Callable[..., Deployment], tmp_path: Path, case: str
) -> None:
    text, problem = BROKEN[case]
    chain = tmp_path / "chain.json"
    chain.write_text(text, encoding="utf-8")
    d = deployment()
    d.redis.lpush(d.keys.requests_queue, envelope(args=[llm_request("waiting")]))
    env = _environment(d, chain)
    commands = {
        "gpusched worker": ["-m", "tasks.edges.cli", "worker", "--loglevel", "INFO"],
        "celery worker": ["-m", "celery", "-A", "tasks.app", "worker", "--pool", "prefork",
                          "--concurrency", "1", "--without-gossip", "--without-mingle", "--loglevel", "INFO"],
    }
    for name, argv in commands.items():
        done = _run(argv, env, tmp_path)
        output = done.stdout + done.stderr
        lines = _problem_lines(output, chain)
        assert done.returncode == 2, (name, done.returncode, output[-2000:])
        assert len(lines) == 1 and problem in lines[0], (name, output[-2000:])
        assert "Traceback" not in output and "ready." not in output, (name, output[-2000:])
    assert d.redis.llen(d.keys.requests_queue) == 1  # nothing consumed
    assert d.redis.hlen(d.keys.nodes) == 0 and d.redis.hlen(d.keys.unacked) == 0


def test_a_cli_command_that_needs_the_chain_exits_2_naming_it(
    deployment: Callable[..., Deployment], tmp_path: Path
) -> None:
    """``gpusched submit`` loads the chain with the runtime: exit 2 (invalid configuration), not 1."""
    text, problem = BROKEN["bad-precise"]
    chain = tmp_path / "chain.json"
    chain.write_text(text, encoding="utf-8")
    request = tmp_path / "request.json"
    request.write_text(json.dumps(llm_request("cli-1")), encoding="utf-8")
    d = deployment()
    done = _run(["-m", "tasks.edges.cli", "submit", str(request)], _environment(d, chain), tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "unexpected error" not in done.stderr
    assert _problem_lines(done.stderr, chain) and problem in done.stderr
