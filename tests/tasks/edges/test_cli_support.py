"""What every gpusched command shares: masked secrets, one line, argument types, JSON input."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tasks.edges.cli_support import (
    CliError,
    one_line,
    positive_seconds,
    read_json,
    redact_url,
    stream_id,
)


def test_urls_are_shown_without_their_password() -> None:
    assert redact_url("redis://:s3cret@host:6379/0") == "redis://:***@host:6379/0"
    assert redact_url("rediss://user:s3cret@host/0") == "rediss://user:***@host/0"
    assert redact_url("redis://host:6379/0") == "redis://host:6379/0"
    assert redact_url("redis://:pw@[::1") == "<invalid URL>"


def test_every_line_masks_the_configured_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSCHED_REDIS_URL", "redis://:hunter2@h:1/0")
    assert one_line("AUTH hunter2 failed\n  at line 2") == "AUTH *** failed at line 2"
    assert one_line("") == "error"


def test_argument_types_refuse_what_makes_no_sense() -> None:
    assert positive_seconds("2.5") == 2.5
    for bad in ("-1", "0", "nan", "inf", "soon"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_seconds(bad)
    assert stream_id("1700000000000-3") == "1700000000000-3"
    for bad in ("garbage", "1-2-3", "", "-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            stream_id(bad)


def test_json_input_errors_are_one_line(tmp_path: Path) -> None:
    cases = {"deep": "[" * 5000 + "]" * 5000, "digits": "9" * 5000, "broken": '{"a": '}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    messages = {}
    for name in cases:
        with pytest.raises(CliError) as raised:
            read_json(str(tmp_path / name))
        assert raised.value.exit_code == 2
        messages[name] = str(raised.value)
    assert messages["deep"].endswith("JSON nested too deeply to read")
    assert "4300 digits" in messages["digits"]
    assert messages["broken"].endswith("invalid JSON at line 1 column 7: Expecting value")


def test_every_option_of_every_command_has_help() -> None:
    from tasks.edges.cli import build_parser

    missing: list[str] = []
    pending = [("gpusched", build_parser())]
    while pending:
        name, parser = pending.pop()
        for action in parser._actions:  # argparse keeps no public list of a parser's actions
            if isinstance(action, argparse._SubParsersAction):
                pending.extend((f"{name} {sub}", child) for sub, child in action.choices.items())
            elif not action.help:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []
