"""GPUStack's own server for the bridge tests: a private PostgreSQL and ``gpustack start``.

* :class:`Postgres` — Debian's PostgreSQL (``initdb`` refuses to run as root, so as root it
  runs as user ``postgres``) in a private data folder on a private port, trust auth on
  127.0.0.1 only.
* :class:`GpustackServer` — ``gpustack start`` from the virtualenv
  ``tools/gpustack-server/setup.sh`` builds (``GPUSTACK_VENV``, default ``.gpustack-venv``),
  on private ports, its own data folder, no gateway, no embedded worker; restartable on the
  same database. ``external_scheduler`` sets the plugin's switch.

Every process started here is stopped by its own pid.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasks.edges.localrun import free_port
from tests.gpustack_bridge.http import HttpError, call

ROOT = Path(__file__).resolve().parents[2]
#: Password of the bootstrap admin of the test servers (localhost only, throw-away data).
ADMIN_PASSWORD = "Bridge-Test-1!"
#: GPUStack's worker heartbeat grace (``envs.WORKER_HEARTBEAT_GRACE_PERIOD``, 150 s by default),
#: shortened so that a synthetic worker that stops heartbeating turns ``not_ready`` within a test;
#: not much further: heartbeats reach the database in batches (every 5 s, later on a loaded box).
HEARTBEAT_GRACE_S = 30


def gpustack_venv() -> Path:
    """The virtualenv holding GPUStack 2.2.3 and the plugin."""
    return Path(os.environ.get("GPUSTACK_VENV") or ROOT / ".gpustack-venv")


def postgres_bin() -> Path | None:
    """The folder of Debian's PostgreSQL binaries (the newest installed), if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def _as_postgres(args: list[str]) -> list[str]:
    """Run as user ``postgres`` when we are root (initdb and postgres refuse root)."""
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


@dataclass
class Postgres:
    """A private PostgreSQL cluster with one database, ``gpustack``."""

    directory: Path
    port: int = field(default_factory=free_port)
    binaries: Path = field(default_factory=lambda: postgres_bin() or Path("/nonexistent"))

    @property
    def url(self) -> str:
        return f"postgresql://root@127.0.0.1:{self.port}/gpustack?sslmode=disable"

    def start(self) -> Postgres:
        self.directory.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres")
        data = self.directory / "data"
        if not data.exists():
            subprocess.run(
                _as_postgres(
                    [
                        str(self.binaries / "initdb"),
                        "-D",
                        str(data),
                        "-U",
                        "root",
                        "--auth=trust",
                        "-E",
                        "UTF8",
                    ]
                ),
                check=True,
                capture_output=True,
                timeout=120,
            )
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(
            _as_postgres(
                [
                    str(self.binaries / "pg_ctl"),
                    "-D",
                    str(data),
                    "-o",
                    options,
                    "-l",
                    str(self.directory / "postgres.log"),
                    "-w",
                    "start",
                ]
            ),
            check=True,
            capture_output=True,
            timeout=120,
        )
        subprocess.run(
            [
                str(self.binaries / "psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "root",
                "-d",
                "postgres",
                "-c",
                "create database gpustack",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        return self

    def stop(self) -> None:
        subprocess.run(
            _as_postgres(
                [
                    str(self.binaries / "pg_ctl"),
                    "-D",
                    str(self.directory / "data"),
                    "-m",
                    "fast",
                    "-w",
                    "stop",
                ]
            ),
            capture_output=True,
            timeout=120,
        )


@dataclass
class GpustackServer:
    """``gpustack start`` on a private port, restartable on the same database and data folder."""

    database_url: str
    directory: Path
    external_scheduler: bool
    port: int = field(default_factory=free_port)
    api_port: int = field(default_factory=free_port)
    proxy_port: int = field(default_factory=free_port)  # GPUStack's worker proxy (default 30079)
    process: subprocess.Popen[bytes] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def admin(self) -> tuple[str, str]:
        return ("admin", ADMIN_PASSWORD)

    def start(self, timeout: float = 240.0) -> GpustackServer:
        """Start the server and wait for ``/healthz`` (25–65 s on two shared cores)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        args = [
            str(gpustack_venv() / "bin" / "gpustack"),
            "start",
            "--data-dir",
            str(self.directory / "data"),
            "--database-url",
            self.database_url,
            "--gateway-mode",
            "disabled",
            "--disable-worker",
            "--bootstrap-password",
            ADMIN_PASSWORD,
            "--disable-update-check",
            "--disable-builtin-observability",
            "--disable-metrics",
            "--port",
            str(self.port),
            "--api-port",
            str(self.api_port),
            "--proxy-port",
            str(self.proxy_port),
        ]
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("GPUSCHED_", "GPUSTACK_"))},
            "GPUSTACK_WORKER_HEARTBEAT_GRACE_PERIOD": str(HEARTBEAT_GRACE_S),
            "HF_HUB_OFFLINE": "1",
            "GPUSCHED_GPUSTACK_EXTERNAL_SCHEDULER": "1" if self.external_scheduler else "0",
            **self.extra_env,
        }
        log = open(self.directory / "server.log", "ab")
        self.process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        log.close()
        self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"gpustack exited ({self.process.returncode}): {self.log_tail()}")
            try:
                call("GET", f"{self.url}/healthz", timeout=2)
                return
            except (OSError, HttpError):
                time.sleep(0.5)
        raise RuntimeError(f"gpustack not healthy after {timeout:g} s: {self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        path = self.directory / "server.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the server's process group, SIGKILL it if it lingers (GPUStack ignores
        SIGTERM for a few seconds while asyncio cancels its tasks)."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout)

    def restart(self, *, crash: bool = False) -> None:
        """Stop (SIGTERM, or SIGKILL with ``crash``: no graceful shutdown at all) and start again."""
        if crash and self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
        self.stop()
        self.start()

    # ------------------------------------------------------------------ admin calls
    def admin_call(self, method: str, path: str, body: Any = None) -> Any:
        return call(method, f"{self.url}{path}", body, basic=self.admin)

    def create_cluster(self, name: str) -> int:
        return int(self.admin_call("POST", "/v2/clusters", {"name": name, "provider": "Docker"})["id"])

    def registration_token(self, cluster_id: int) -> str:
        return str(self.admin_call("GET", f"/v2/clusters/{cluster_id}/registration-token")["token"])

    def api_key(self, name: str) -> str:
        return str(self.admin_call("POST", "/v2/api-keys", {"name": name, "expires_in": 0})["value"])


def prerequisites() -> str | None:
    """What is missing to run GPUStack's server here (None when nothing is)."""
    if postgres_bin() is None:
        return "PostgreSQL is not installed (apt-get install postgresql)"
    if not (gpustack_venv() / "bin" / "gpustack").exists():
        return f"no GPUStack at {gpustack_venv()} (bash tools/gpustack-server/setup.sh)"
    if shutil.which("redis-server") is None:
        return "redis-server is not installed"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "runuser is missing (PostgreSQL refuses to run as root)"
    return None
