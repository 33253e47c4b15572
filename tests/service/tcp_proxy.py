"""A localhost TCP proxy between worker processes and Redis: added latency and connection resets.

:class:`TcpProxy` listens on a free port of 127.0.0.1 and forwards every
connection to an upstream ``host:port``. Each direction delays what it
forwards by ``delay_s`` (so ``+2 × delay_s`` round-trip time) without
limiting throughput: a reader thread timestamps each chunk and a writer
thread sends it when it is due. :meth:`TcpProxy.reset_all` ends every open
connection with a TCP reset on both sides (``SO_LINGER`` 0), as a flaky
network or a restarted load balancer does; new connections are accepted at
once.
"""

from __future__ import annotations

import queue
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

#: Bytes read per ``recv``.
CHUNK = 65536


@dataclass(eq=False)
class _Pipe:
    """One proxied connection: the client's socket and the upstream socket."""

    client: socket.socket
    upstream: socket.socket
    closed: threading.Event = field(default_factory=threading.Event)

    def reset(self) -> None:
        """Close both sockets with a reset (no FIN, unsent data dropped)."""
        if self.closed.is_set():
            return
        self.closed.set()
        for sock in (self.client, self.upstream):
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                # wakes the reader blocked in recv() (a close alone would wait for it) and sends
                # nothing; the close that follows, with a zero linger, sends the reset
                sock.shutdown(socket.SHUT_RD)
            except OSError:
                pass
            try:
                sock.close()
            except OSError:
                pass


class TcpProxy:
    """Forward 127.0.0.1:<port> to ``upstream`` with ``delay_s`` each way; reset on demand."""

    def __init__(self, upstream_port: int, delay_s: float = 0.0, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self.delay_s = delay_s
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._pipes: list[_Pipe] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self.resets = 0
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    def url(self, database: int = 0) -> str:
        """``redis://127.0.0.1:<proxy port>/<database>``."""
        return f"redis://127.0.0.1:{self.port}/{database}"

    def open_connections(self) -> int:
        """Connections open through the proxy now."""
        with self._lock:
            return sum(not pipe.closed.is_set() for pipe in self._pipes)

    def reset_all(self) -> int:
        """Reset every open connection; returns how many were reset."""
        with self._lock:
            pipes, self._pipes = [p for p in self._pipes if not p.closed.is_set()], []
        for pipe in pipes:
            pipe.reset()
        self.resets += 1
        return len(pipes)

    def close(self) -> None:
        """Stop accepting and reset every connection."""
        self._stopped.set()
        try:
            self._listener.close()
        except OSError:
            pass
        self.reset_all()

    # ------------------------------------------------------------- internals
    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            pipe = _Pipe(client, upstream)
            with self._lock:
                self._pipes.append(pipe)
            for source, target in ((client, upstream), (upstream, client)):
                self._forward(pipe, source, target)

    def _forward(self, pipe: _Pipe, source: socket.socket, target: socket.socket) -> None:
        due: queue.Queue[tuple[float, bytes]] = queue.Queue()
        threading.Thread(target=self._read, args=(pipe, source, due), daemon=True).start()
        threading.Thread(target=self._write, args=(pipe, target, due), daemon=True).start()

    def _read(self, pipe: _Pipe, source: socket.socket, due: queue.Queue[tuple[float, bytes]]) -> None:
        while not pipe.closed.is_set():
            try:
                data = source.recv(CHUNK)
            except OSError:
                data = b""
            due.put((time.monotonic() + self.delay_s, data))
            if not data:
                return

    def _write(self, pipe: _Pipe, target: socket.socket, due: queue.Queue[tuple[float, bytes]]) -> None:
        while True:
            at, data = due.get()
            if pipe.closed.is_set():
                return
            wait = at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if not data:  # the other side closed: pass the close on
                pipe.reset()
                return
            try:
                target.sendall(data)
            except OSError:
                pipe.reset()
                return
