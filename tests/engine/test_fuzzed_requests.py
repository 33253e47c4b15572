"""Fuzzed requests through ``schedule()`` and the ``gpusched schedule`` CLI (issue 17, item 1).

Keys and values come from the whole code-point range, lone surrogates
included (``tests/fuzzing.py``; hypothesis' text leaves surrogates out, which
is how an unknown key ``"\\ud800"`` nesting 65 levels once got out as an
unencodable ``error.field``). A few hundred seeded cases run here;
``bench/fuzz_doors.py`` runs 20,000 through every door, the service's raw
queue included.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fuzzing import cases, cli_problems, result_problems, run_cli_in_process, through_cli, through_schedule

from scheduler_core import schedule

ROOT = Path(__file__).resolve().parents[2]


def nested(depth: int) -> object:
    value: object = 0
    for _ in range(depth):
        value = [value]
    return value


def _poison() -> dict[str, object]:
    """The request from the issue: an unknown key that is a lone surrogate, nesting 70 levels."""
    request = next(cases(0, 1))
    request = {key: value for key, value in request.items() if key != "request_id"} | {"request_id": "poison"}
    request["\ud800"] = nested(70)
    return request


def test_the_surrogate_key_that_crashed_the_workers_is_rejected_naming_its_escape() -> None:
    result = schedule(_poison())
    assert (result.status, result.error.code) == ("rejected", "invalid_request")  # type: ignore[union-attr]
    assert result.error.field == "\\ud800"  # type: ignore[union-attr]  # the six characters of its escape
    assert json.loads(result.model_dump_json())["error"]["field"] == "\\ud800"
    assert result_problems(result.model_dump_json()) == []


def test_an_empty_key_or_one_with_dots_is_named_not_lost() -> None:
    """A dotted path cannot name the key ``""`` or ``".x"``: the core names them by structure."""
    for key, field in (("", '""'), (".x", ".x")):
        request = _poison()
        del request["\ud800"]
        request[key] = nested(70)
        assert schedule(request).error.field == field  # type: ignore[union-attr]


def test_seeded_fuzzed_requests_survive_schedule() -> None:
    assert through_schedule(list(cases(19, 500))) == []  # 3 escaped exceptions before


def test_seeded_fuzzed_requests_survive_the_cli() -> None:
    assert through_cli(list(cases(18, 120))) == []


def test_the_cli_process_rejects_the_poison_with_exit_2_and_one_line(tmp_path: Path) -> None:
    """A real ``gpusched schedule FILE``: before, exit 1 and "unexpected error:
    PydanticSerializationError"; now the rejection (exit 2), the JSON result on stdout."""
    path = tmp_path / "poison.json"
    path.write_text(json.dumps(_poison()), encoding="ascii")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")}
    done = subprocess.run([sys.executable, "-m", "tasks.edges.cli", "schedule", str(path)], cwd=ROOT,
                          env=env, capture_output=True, timeout=120, check=False)
    assert cli_problems(done.returncode, done.stdout, done.stderr) == []
    assert done.returncode == 2
    assert done.stderr.decode() == "gpusched: rejected: \\ud800: nests more than 64 levels deep\n"
    assert json.loads(done.stdout)["error"]["field"] == "\\ud800"


def test_in_process_cli_sees_what_the_process_sees() -> None:
    """The in-process runner the fuzz uses gives the real command's answer for the poison."""
    code, out, err = run_cli_in_process(["schedule", "-"], json.dumps(_poison()))
    assert (code, err.decode()) == (2, "gpusched: rejected: \\ud800: nests more than 64 levels deep\n")
    assert json.loads(out)["request_id"] == "poison"
