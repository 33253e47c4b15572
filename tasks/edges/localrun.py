"""Local processes for the demo, the service tests and the benchmark.

* :func:`start_redis` — a private ``redis-server`` on a free port (optionally
  with AOF in its own directory), and :func:`ensure_redis_binary` to install
  Debian's package when it is missing and we are root.
* :class:`WorkerProcess` — a real ``celery -A tasks.app worker`` subprocess
  with its log in a file, readiness detection, and SIGKILL/SIGTERM helpers
  for crash tests.

Nothing here is used by the service itself.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import redis

#: Environment variable tests read to know they must not skip (CI runs).
CI_ENV = "CI"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (``redis-server --port 0`` means "no TCP")."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def reachable(url: str, timeout: float = 0.5) -> bool:
    """Whether a Redis server answers PING at ``url``."""
    client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def redis_binary() -> str | None:
    """Path of ``redis-server``, if installed."""
    return shutil.which("redis-server")


def ensure_redis_binary() -> str:
    """``redis-server``'s path, installing Debian's package first when missing and root.

    Raises:
        RuntimeError: missing and not installable here (the message says what to do).
    """
    found = redis_binary()
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RuntimeError(
            "redis-server is not installed and cannot be installed automatically here; "
            "install it (Debian/Ubuntu: sudo apt-get install redis-server) or point "
            "GPUSCHED_REDIS_URL at a running Redis >= 6.2"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "redis-server"], check=True, env=env)
    found = redis_binary()
    if not found:
        raise RuntimeError("apt-get installed redis-server but it is not on PATH")
    return found


@dataclass
class RedisServer:
    """A ``redis-server`` child process."""

    port: int
    directory: Path
    appendonly: bool
    binary: str
    owns_directory: bool = False
    process: subprocess.Popen[bytes] | None = None
    password: str | None = None
    #: Port of a local master this server replicates (``--replicaof``); None: a master.
    replica_of: int | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0`` (``redis://:<password>@...`` when it requires one)."""
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start (or restart) the server and wait until it answers."""
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.directory), "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "always" if self.appendonly else "everysec",
            "--maxmemory-policy", "noeviction",
            *(["--requirepass", self.password] if self.password else []),
            *(["--masterauth", self.password] if self.password and self.replica_of else []),
            *(["--replicaof", "127.0.0.1", str(self.replica_of)] if self.replica_of else []),
        ]
        log = open(self.directory / "redis.log", "ab")
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while not reachable(self.url, 0.2):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.05)
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        """Stop the server (SIGTERM flushes the AOF and exits cleanly)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout)

    def remove(self) -> None:
        """Stop the server and delete its directory if :func:`start_redis` created it."""
        self.stop()
        if self.owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)


def start_redis(
    *, appendonly: bool = False, directory: Path | None = None, password: str | None = None,
    replica_of: int | None = None, timeout: float = 10.0,
) -> RedisServer:
    """Start a private ``redis-server`` on a free port (requiring ``password`` when given;
    a replica of the local master on port ``replica_of`` when given), waiting up to
    ``timeout`` seconds for it to answer (a server loading a large dump answers only after).

    Raises:
        RuntimeError: the binary is missing or the server does not come up.
    """
    binary = redis_binary()
    if binary is None:
        raise RuntimeError("redis-server is not installed")
    folder = directory or Path(tempfile.mkdtemp(prefix="gpusched-redis-"))
    folder.mkdir(parents=True, exist_ok=True)
    server = RedisServer(free_port(), folder, appendonly, binary, owns_directory=directory is None,
                         password=password, replica_of=replica_of)
    return server.start(timeout)


#: The settings :func:`state_client` takes from a worker's environment (how to reach Redis).
CONNECTION_SETTINGS = (
    "redis_url", "redis_username", "redis_password", "redis_sentinels", "redis_sentinel_master",
    "redis_sentinel_password",
)


def state_client(env: dict[str, str]) -> redis.Redis:
    """A client of the Redis that the ``GPUSCHED_*`` variables in ``env`` name (through Sentinel
    when they list Sentinels), as the service's own clients reach it."""
    from tasks.base.settings import Settings
    from tasks.state.context import redis_client

    values = {name: env[f"GPUSCHED_{name.upper()}"] for name in CONNECTION_SETTINGS
              if env.get(f"GPUSCHED_{name.upper()}")}
    return redis_client(Settings(**values))  # type: ignore[arg-type]


@dataclass
class WorkerProcess:
    """A ``celery -A tasks.app worker`` subprocess (prefork pool by default).

    ``queues``: None for the partition's queues (``--queues``), ``()`` for no
    ``--queues`` option (what the app declares), else the queues named.
    """

    env: dict[str, str]
    name: str
    log_path: Path
    concurrency: int = 1
    pool: str = "prefork"
    loglevel: str = "WARNING"
    extra: list[str] = field(default_factory=list)
    queues: tuple[str, ...] | None = None
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        """Launch the worker (returns at once; see :meth:`wait_ready`)."""
        from tasks.base.keys import Keys

        partition = Keys(self.env.get("GPUSCHED_CLUSTER") or None)
        queues = self.queues if self.queues is not None else partition.queues
        # queues == (): no --queues at all, the app's own declaration (a plain celery worker)
        selected = ["--queues", ",".join(queues)] if queues else []
        args = [
            sys.executable, "-m", "celery", "-A", "tasks.app", "worker",
            *selected, "--pool", self.pool, "--concurrency", str(self.concurrency),
            "--hostname", f"{self.name}@%h", "--loglevel", self.loglevel,
            "--without-gossip", "--without-mingle", *self.extra,
        ]
        log = open(self.log_path, "ab")
        # several local workers share one host: no metrics port unless the caller names one
        env = {**os.environ, "GPUSCHED_METRICS_PORT": "0", **self.env, "GPUSCHED_LOG_FORMAT": "json"}
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        return self

    def wait_ready(self, timeout: float = 30.0) -> WorkerProcess:
        """Block until the worker registered itself in ``gpusched:nodes`` (on ``worker_ready``).

        Raises:
            RuntimeError: the worker exited or did not become ready in time.
        """
        from tasks.base.keys import Keys

        key = Keys(self.env.get("GPUSCHED_CLUSTER") or None).nodes
        client = state_client(self.env)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if self.process is not None and self.process.poll() is not None:
                    raise RuntimeError(f"worker {self.name} exited: {self.log_tail()}")
                nodes = cast(list[str], client.hkeys(key))
                if any(node.startswith(f"{self.name}@") for node in nodes):
                    return self
                time.sleep(0.05)
        finally:
            client.close()
        raise RuntimeError(f"worker {self.name} not ready after {timeout:g} s: {self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the worker's log."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    @property
    def pid(self) -> int:
        """The main process id."""
        assert self.process is not None
        return self.process.pid

    def pool_pids(self) -> list[int]:
        """Pids of the pool processes (children of the main process)."""
        children: list[int] = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == self.pid:
                children.append(int(entry.name))
        return children

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the main process."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)

    def stop(self, timeout: float = 15.0) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL if it hangs."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout)
