"""A local Redis that fails over: a master, its replicas and Sentinels, for the tests and the benchmark.

:func:`start_replicated` starts one master, ``replicas`` replicas (``redis-server
--replicaof``) and ``sentinels`` Sentinel processes (Debian's ``redis-sentinel``,
else ``redis-server --sentinel``), each on a free port of 127.0.0.1 with its
own folder and its own ``sentinel.conf`` (Sentinel rewrites it as it learns
the topology). :class:`ReplicatedRedis` kills the master, waits until the
Sentinels promoted a replica, and restarts the old master (which the Sentinels
then turn into a replica of the new one).

:meth:`ReplicatedRedis.freeze` stops a replica (SIGSTOP) so a test can make
the master's last writes miss it.

Short Sentinel timings make a failover take a few seconds in tests
(``down_after_ms``, ``failover_timeout_ms``); Sentinel's own defaults are
30 s and 180 s.

Nothing here is used by the service itself.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import redis

from tasks.edges.localrun import RedisServer, free_port, redis_binary, start_redis

T = TypeVar("T")

#: Name the Sentinels monitor the master under (``redis_sentinel_master``).
MASTER_NAME = "gpusched"
#: Sentinels that must agree the master is down (a majority of three).
QUORUM = 2


def sentinel_command() -> list[str] | None:
    """How to start a Sentinel: ``redis-sentinel``, else ``redis-server --sentinel``; None: neither."""
    found = shutil.which("redis-sentinel")
    if found:
        return [found]
    server = redis_binary()
    return [server, "--sentinel"] if server else None


@dataclass
class SentinelProcess:
    """One ``redis-sentinel`` child process monitoring :data:`MASTER_NAME`."""

    port: int
    directory: Path
    master_port: int
    down_after_ms: int
    failover_timeout_ms: int
    password: str | None = None
    master_password: str | None = None
    process: subprocess.Popen[bytes] | None = None

    def config(self) -> str:
        """The ``sentinel.conf`` it starts from."""
        lines = [
            f"port {self.port}", "bind 127.0.0.1", f"dir {self.directory}",
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master_port} {QUORUM}",
            f"sentinel down-after-milliseconds {MASTER_NAME} {self.down_after_ms}",
            f"sentinel failover-timeout {MASTER_NAME} {self.failover_timeout_ms}",
            f"sentinel parallel-syncs {MASTER_NAME} 1",
        ]
        if self.master_password:
            lines.append(f"sentinel auth-pass {MASTER_NAME} {self.master_password}")
        if self.password:  # clients and the other Sentinels authenticate with it
            lines += [f"requirepass {self.password}", f"sentinel sentinel-pass {self.password}"]
        return "\n".join(lines) + "\n"

    def start(self, command: list[str]) -> SentinelProcess:
        """Write the config and launch the Sentinel (returns once it answers PING)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        conf = self.directory / "sentinel.conf"
        conf.write_text(self.config(), encoding="utf-8")
        log = open(self.directory / "sentinel.log", "ab")
        self.process = subprocess.Popen([*command, str(conf)], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        _wait_for(self._answers, 10.0, f"sentinel on port {self.port}", self.process)
        return self

    def client(self) -> redis.Redis:
        """A client of this Sentinel."""
        return redis.Redis("127.0.0.1", self.port, password=self.password, decode_responses=True,
                           socket_timeout=1.0, socket_connect_timeout=1.0)

    def ask(self, question: Callable[[redis.Redis], T]) -> T | None:
        """``question(client)`` on a fresh client of this Sentinel (None: it did not answer)."""
        client = self.client()
        try:
            return question(client)
        except (redis.RedisError, OSError):
            return None
        finally:
            client.close()

    def _answers(self) -> bool:
        return bool(self.ask(lambda client: client.ping()))

    def master_port_seen(self) -> int | None:
        """The master's port as this Sentinel names it now (None: it does not answer)."""
        address = self.ask(lambda client: client.sentinel_get_master_addr_by_name(MASTER_NAME))
        return int(address[1]) if isinstance(address, tuple | list) else None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the Sentinel."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


@dataclass
class ReplicatedRedis:
    """A master, its replicas and the Sentinels watching them (all local child processes)."""

    servers: list[RedisServer]
    sentinels: list[SentinelProcess]
    password: str | None = None
    sentinel_password: str | None = None
    #: Index in :attr:`servers` of the master as last confirmed by :meth:`wait_for_master`.
    master_index: int = 0
    killed: list[int] = field(default_factory=list)

    @property
    def sentinel_list(self) -> str:
        """``redis_sentinels``: ``127.0.0.1:<port>,...``."""
        return ",".join(f"127.0.0.1:{sentinel.port}" for sentinel in self.sentinels)

    @property
    def master(self) -> RedisServer:
        """The master as last confirmed."""
        return self.servers[self.master_index]

    def url(self) -> str:
        """``redis_url`` through Sentinel: the scheme and database (the host is not used)."""
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}sentinel-master/0"

    def client(self, index: int) -> redis.Redis:
        """A direct client of server ``index`` (not through Sentinel)."""
        server = self.servers[index]
        return redis.Redis("127.0.0.1", server.port, password=self.password, decode_responses=True,
                           socket_timeout=2.0, socket_connect_timeout=1.0)

    def kill_master(self) -> int:
        """SIGKILL the current master; returns its index."""
        index = self.master_index
        self.master.stop(signal.SIGKILL)
        self.killed.append(index)
        return index

    def wait_for_master(self, timeout: float, *, other_than: int | None = None) -> int:
        """Wait until every Sentinel names the same master (not ``other_than``) and it says it is
        one; returns its index.

        Raises:
            AssertionError: no agreement within ``timeout`` seconds.
        """
        by_port = {server.port: i for i, server in enumerate(self.servers)}

        def agreed() -> int | None:
            ports = {sentinel.master_port_seen() for sentinel in self.sentinels}
            if len(ports) != 1:
                return None
            port = next(iter(ports))
            index = by_port.get(port) if port is not None else None
            if index is None or index == other_than or self._role(index) != "master":
                return None
            return index

        self.master_index = _wait_for(agreed, timeout, "the Sentinels to agree on a master")
        return self.master_index

    def replicas(self) -> list[int]:
        """Indexes of the servers alive other than the master."""
        return [i for i in range(len(self.servers)) if i != self.master_index and i not in self.killed]

    def freeze(self, index: int) -> None:
        """SIGSTOP server ``index`` (it reads nothing, acknowledges nothing, until :meth:`thaw`)."""
        process = self.servers[index].process
        if process is not None:
            process.send_signal(signal.SIGSTOP)

    def thaw(self, index: int) -> None:
        """SIGCONT server ``index``."""
        process = self.servers[index].process
        if process is not None:
            process.send_signal(signal.SIGCONT)

    def restart(self, index: int) -> None:
        """Start server ``index`` again with its original arguments (an old master restarts as a
        master; the Sentinels then make it a replica of the current one)."""
        self.servers[index].start()
        self.killed.remove(index)

    def wait_replicating(self, index: int, timeout: float) -> None:
        """Wait until server ``index`` is a replica with its link to the master up."""

        def linked() -> bool | None:
            info = self._replication_info(index)
            return info.get("role") == "slave" and info.get("master_link_status") == "up"

        _wait_for(linked, timeout, f"server {index} to replicate the master")

    def _role(self, index: int) -> str | None:
        role = self._replication_info(index).get("role")
        return str(role) if role else None

    def _replication_info(self, index: int) -> dict[str, object]:
        """``INFO replication`` of server ``index`` (empty: it did not answer)."""
        client = self.client(index)
        try:
            return dict(client.info("replication"))
        except (redis.RedisError, OSError):
            return {}
        finally:
            client.close()

    def stop(self) -> None:
        """Stop every Sentinel, then every server."""
        for sentinel in self.sentinels:
            sentinel.stop()
        for server in self.servers:
            server.stop()


def start_replicated(
    directory: Path, *, replicas: int = 1, sentinels: int = 3, down_after_ms: int = 1000,
    failover_timeout_ms: int = 5000, password: str | None = None, sentinel_password: str | None = None,
) -> ReplicatedRedis:
    """Start a master, ``replicas`` replicas and ``sentinels`` Sentinels under ``directory``.

    Returns once every replica replicates and every Sentinel sees every replica.

    Raises:
        RuntimeError: ``redis-server`` or a Sentinel binary is missing, or a process did not start.
    """
    command = sentinel_command()
    if command is None:
        raise RuntimeError("redis-sentinel (or redis-server) is not installed")
    master = start_redis(directory=directory / "redis-0", password=password)
    servers = [master] + [
        start_redis(directory=directory / f"redis-{i}", password=password, replica_of=master.port)
        for i in range(1, replicas + 1)
    ]
    group = ReplicatedRedis(servers, [], password, sentinel_password)
    for i in range(1, replicas + 1):
        group.wait_replicating(i, 30.0)
    group.sentinels = [
        SentinelProcess(free_port(), directory / f"sentinel-{i}", master.port, down_after_ms,
                        failover_timeout_ms, sentinel_password, password).start(command)
        for i in range(sentinels)
    ]
    _wait_for(lambda: all(_knows_replicas(s, replicas, sentinels) for s in group.sentinels), 30.0,
              "the Sentinels to discover the replicas and each other")
    return group


def _knows_replicas(sentinel: SentinelProcess, replicas: int, sentinels: int) -> bool:
    state = sentinel.ask(lambda client: client.sentinel_master(MASTER_NAME))
    if not isinstance(state, dict):
        return False
    others = int(state.get("num-other-sentinels", 0))
    return int(state.get("num-slaves", 0)) >= replicas and others >= sentinels - 1


def _wait_for(
    predicate: Callable[[], T | None], timeout: float, what: str,
    process: subprocess.Popen[bytes] | None = None,
) -> T:
    """Poll ``predicate`` until it returns something other than None or False (returned), or
    raise after ``timeout`` seconds (or at once when ``process`` exited)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value is not None and value is not False:
            return value
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what}: the process exited")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)
