"""What every ``gpusched`` command shares: one-line errors with secrets masked, argument types,
reading JSON input, and a quick check that the service's Redis answers.

The CLI's promise (``docs/service.md``, *Exit codes*): a bad input, a bad
setting or an unreachable service gives exactly one line on stderr and a
documented exit code, never a traceback, and never the Redis password. Nothing
here imports Celery or Redis at module import time (the offline commands must
work without them).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

#: Exit codes (documented in docs/service.md).
EXIT_OK = 0
EXIT_FAILURE = 1  # the service failed (Redis unreachable, timeout, replay differences) or stdout closed
EXIT_BAD_INPUT = 2  # bad input, a rejected request, bad settings, bad usage

#: Redis stream ids ``gpusched replay --since`` takes: ``<ms>`` or ``<ms>-<seq>``.
STREAM_ID = re.compile(r"[0-9]{1,20}(?:-[0-9]{1,20})?")
#: Environment variable of the Redis URL (its password is masked in every message).
REDIS_URL_ENV = "GPUSCHED_REDIS_URL"
#: Password settings a message must never show, read from the environment.
PASSWORD_ENV = ("GPUSCHED_REDIS_PASSWORD", "GPUSCHED_REDIS_SENTINEL_PASSWORD")


class CliError(Exception):
    """A failure reported as one line on stderr with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Parser(argparse.ArgumentParser):
    """argparse, with usage errors as one :class:`CliError` line (exit 2) instead of usage + error."""

    def error(self, message: str) -> NoReturn:
        """Raise the usage error as one line naming the command's help."""
        raise CliError(f"{message} (see {self.prog} --help)", EXIT_BAD_INPUT)


# ------------------------------------------------------------------ secrets
def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (unparseable URLs are shown as ``<invalid URL>``)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "<invalid URL>"
    if not password:
        return url
    return url.replace(f":{password}@", ":***@", 1)


def _password(url: str | None) -> str | None:
    if not url:
        return None
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def redis_location(settings: Any) -> str:
    """Where the service's Redis is, for a message (never a password): ``Redis at <URL>``, or
    ``Redis master '<name>' through Sentinel <host:port,...>``."""
    if settings.redis_sentinels:
        return f"Redis master {settings.redis_sentinel_master!r} through Sentinel {settings.redis_sentinels}"
    return f"Redis at {redact_url(settings.redis_url)}"


def known_secrets() -> list[str]:
    """Passwords this process may know: from ``GPUSCHED_REDIS_URL`` and ``service.json``, and the
    password settings in the environment."""
    passwords = [os.environ.get(name) for name in PASSWORD_ENV]
    urls = [os.environ.get(REDIS_URL_ENV)]
    try:
        from tasks.base.settings import config_dir

        document = json.loads((config_dir() / "service.json").read_text(encoding="utf-8"))
        urls.append(document.get("redis_url") if isinstance(document, dict) else None)
    except Exception:  # the masking itself must never fail; a bad file is reported elsewhere
        pass
    return [secret for secret in (*(_password(url) for url in urls), *passwords) if secret]


def one_line(text: str) -> str:
    """``text`` on one line, with every known password masked and input-derived text rendered
    (:func:`scheduler_core.render_text`: a lone surrogate is shown as its escape)."""
    from scheduler_core import render_text  # loaded only to print an error

    for secret in known_secrets():
        text = text.replace(secret, "***")
    return " ".join(render_text(text).split()) or "error"


def error_line(error: BaseException) -> str:
    """``Type: first line`` of an exception (for errors nobody anticipated)."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


# ------------------------------------------------------------ argument types
def positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} must be a number of seconds above 0")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer above 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} must be above 0")
    return value


def non_negative_int(text: str) -> int:
    """An argparse type: an integer of 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} must be 0 or more")
    return value


def stream_id(text: str) -> str:
    """An argparse type: a Redis stream id (``1700000000000`` or ``1700000000000-0``)."""
    if not STREAM_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not a stream id (<milliseconds> or <milliseconds>-<sequence>)"
        )
    return text


# ---------------------------------------------------------------- JSON input
def read_json(source: str) -> Any:
    """Read JSON from a file path or ``-`` (stdin).

    Raises:
        CliError: the input is missing, closed, unreadable, not UTF-8, not JSON,
            nested too deeply for the parser, or holds a number Python refuses
            (e.g. an integer of more than 4,300 digits); exit code 2.
    """
    return _parse_json(_read_text(source), source)


def read_json_documents(source: str) -> list[Any]:
    """Read one JSON document, or JSON lines (one document per non-empty line), from a path or ``-``.

    A document that is a list counts as its items. Raises :class:`CliError` as
    :func:`read_json` does; for JSON lines, naming the line.
    """
    text = _read_text(source)
    lines = [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    try:
        documents = [_parse_json(text, source)]
    except CliError:
        if len(lines) < 2:
            raise
        documents = [_parse_json(line, f"{source} line {number}") for number, line in lines]
    return [item for doc in documents for item in (doc if isinstance(doc, list) else [doc])]


def _parse_json(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        raise CliError(f"{source}: invalid JSON at {where}: {error.msg}") from None
    except RecursionError:
        raise CliError(f"{source}: JSON nested too deeply to read") from None
    except ValueError as error:  # e.g. an integer beyond the digit limit
        raise CliError(f"{source}: unreadable JSON value: {error_line(error)}") from None


#: The most a command reads from one input (a file or stdin): far above any document the
#: service takes (``max_snapshot_bytes`` is 64 MiB) or a full cluster dump for ``schedule``,
#: and a bound on what ``/dev/zero`` or an endless pipe can make the CLI hold.
MAX_INPUT_BYTES = 256 * 1024 * 1024


def _read_text(source: str, limit: int = MAX_INPUT_BYTES) -> str:
    if source == "-":
        if sys.stdin is None or sys.stdin.closed:
            raise CliError("cannot read -: standard input is closed")
        try:  # bytes, decoded here: the locale's error handler must not hide invalid UTF-8
            data = sys.stdin.buffer.read(limit + 1)
        except OSError as error:
            raise CliError(f"cannot read -: {error.strerror or error}") from None
    else:
        try:
            with Path(source).open("rb") as handle:
                data = handle.read(limit + 1)
        except OSError as error:
            raise CliError(f"cannot read {source}: {error.strerror or error}") from None
    if len(data) > limit:
        raise CliError(f"cannot read {source}: more than {limit} bytes (the command line's input limit)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise CliError(f"cannot read {source}: not UTF-8 text") from None
