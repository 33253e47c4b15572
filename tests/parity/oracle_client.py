"""A long-lived GPUStack oracle process (``oracle.py --stream``).

The oracle lives in ``tools/gpustack-oracle`` (``ORACLE_DIR`` overrides) and
runs in its own virtualenv, ``<repo>/.oracle-venv`` (``ORACLE_VENV``
overrides), which ``tools/gpustack-oracle/setup.sh`` builds — never the
project's ``.venv``. One request per line goes in, one result per line comes
out, so a run pays the ~4 s import once.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def oracle_dir() -> Path:
    """Where ``oracle.py`` lives."""
    return Path(os.environ.get("ORACLE_DIR") or REPO / "tools" / "gpustack-oracle")


def oracle_venv() -> Path:
    """The oracle's virtualenv (built by ``setup.sh``)."""
    return Path(os.environ.get("ORACLE_VENV") or REPO / ".oracle-venv")


def oracle_available() -> bool:
    """True when the oracle script and a built virtualenv are both present."""
    return (oracle_dir() / "oracle.py").is_file() and (oracle_venv() / "bin" / "python").exists()


class OracleError(RuntimeError):
    """The oracle process died or answered something that is not a result line."""


class Oracle:
    """One oracle process; ``send``/``receive`` may be split to overlap work with it."""

    def __init__(self) -> None:
        if not oracle_available():
            raise OracleError(
                f"no oracle: need {oracle_dir() / 'oracle.py'} and {oracle_venv() / 'bin/python'}"
                f" (bash tools/gpustack-oracle/setup.sh)"
            )
        env = dict(os.environ, PYTHONHASHSEED="0", ORACLE_VENV=str(oracle_venv()))
        self._scratch = tempfile.TemporaryDirectory(prefix="gpusched-oracle-")
        self._proc = subprocess.Popen(
            [str(oracle_venv() / "bin" / "python"), str(oracle_dir() / "oracle.py"), "--stream"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=self._scratch.name,
        )

    def send(self, request: dict[str, Any]) -> None:
        """Queue one request (answer it with ``receive``, in order)."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(request, separators=(",", ":")) + "\n")
        self._proc.stdin.flush()

    def receive(self) -> dict[str, Any]:
        """The result of the oldest request sent and not yet received."""
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise OracleError(f"the oracle exited (code {self._proc.poll()})")
        result: dict[str, Any] = json.loads(line)
        return result

    def decide(self, request: dict[str, Any]) -> dict[str, Any]:
        """GPUStack's result for ``request``."""
        self.send(request)
        return self.receive()

    def close(self) -> None:
        if self._proc.stdin:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout:
            self._proc.stdout.close()
        self._scratch.cleanup()

    def __enter__(self) -> Oracle:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
