"""``gpusched schedule`` / ``gpusched tune``: JSON on stdout, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples").glob("*.json"))


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tasks.edges.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


def test_examples_are_at_least_eight_and_decide():
    """Every example request decides in process (issue 2: >= 8 realistic requests)."""
    assert len(EXAMPLES) >= 8
    proc = run("schedule", str(EXAMPLES[0]))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "scheduled"


def test_unschedulable_exits_zero():
    """Exit 0 for scheduled and unschedulable alike."""
    proc = run("schedule", str(ROOT / "examples" / "08-unschedulable.json"))
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["status"] == "unschedulable"


def test_stdin_and_rejected_exit_two_with_one_line():
    """``-`` reads stdin; a rejected request exits 2 with one line naming the field."""
    body = json.loads((ROOT / "examples" / "01-single-4090.json").read_text())
    body["model"]["backend_parameters"] = ["--tp-size", "3"]
    proc = run("schedule", "-", stdin=json.dumps(body))
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"]["field"] == "model.backend_parameters"
    assert proc.stderr == (
        "gpusched: rejected: model.backend_parameters: Total number of attention heads (28) must be "
        "divisible by tp-size (3).\n"
    )


@pytest.mark.parametrize(
    ("args", "stdin", "expected"),
    [
        (
            ("schedule", "/no/such/file.json"),
            None,
            "gpusched: cannot read /no/such/file.json: No such file or directory\n",
        ),
        (
            ("schedule", "-"),
            "{not json",
            "gpusched: -: invalid JSON at line 1 column 2: "
            "Expecting property name enclosed in double quotes\n",
        ),
        (("tune", "-"), "[]", None),
    ],
)
def test_bad_input_is_one_line_exit_two(args, stdin, expected):
    """Bad files and bad JSON: exit 2, a single line on stderr, no traceback."""
    proc = run(*args, stdin=stdin)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    if expected is not None:
        assert proc.stderr == expected


def test_tune_prints_result():
    """``gpusched tune`` prints the Contract 2 result."""
    request = {
        "explicit_args": {"performance_mode": "memory", "num_gpus": 1},
        "platform": {
            "kind": "cuda",
            "device_total_memory_gib": 80,
            "available_memory_gib_by_device": {"0": 80},
        },
        "pipeline": {"pipeline_config_class": "FluxPipelineConfig", "task_type": "T2I"},
    }
    proc = run("tune", "-", stdin=json.dumps(request))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["performance_mode"] == "memory"
    assert result["use_fsdp_inference"] is False
    assert result["dit_cpu_offload"] is True


def test_tune_refusal_from_the_flow_is_one_line_exit_two():
    """A ValueError raised inside tune() (upstream's LTX-2.3 mode check) prints one line, exit 2."""
    request = {
        "explicit_args": {"ltx2_two_stage_device_mode": "foo"},
        "platform": {
            "kind": "cuda",
            "device_total_memory_gib": 80,
            "available_memory_gib_by_device": {"0": 80},
        },
        "pipeline": {"pipeline_config_class": "LTX23PipelineConfig", "is_ltx23_two_stage_pipeline": True},
    }
    proc = run("tune", "-", stdin=json.dumps(request))
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == (
        "gpusched: invalid tune request: Invalid ltx2_two_stage_device_mode='foo'. "
        "Expected one of ('original', 'resident', 'snapshot').\n"
    )


def test_a_settings_typo_stops_the_offline_commands_but_not_help():
    """The offline commands use no setting, but a typo in GPUSCHED_* is still refused (one line,
    exit 2); --help still prints, so the operator can read how to fix it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")}
    env["GPUSCHED_UNREACHABLE_GRACE"] = "5"
    expected = ("gpusched: unknown setting in the environment: GPUSCHED_UNREACHABLE_GRACE "
                "(did you mean GPUSCHED_UNREACHABLE_GRACE_S?)\n")
    for args in (("schedule", str(EXAMPLES[0])), ("--version",)):
        proc = subprocess.run([sys.executable, "-m", "tasks.edges.cli", *args], env=env, capture_output=True,
                              text=True, cwd=ROOT, timeout=60, check=False)
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", expected), args
    helped = subprocess.run([sys.executable, "-m", "tasks.edges.cli", "--help"], env=env, capture_output=True,
                            text=True, cwd=ROOT, timeout=60, check=False)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: gpusched")
