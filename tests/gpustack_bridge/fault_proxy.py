"""A localhost HTTP proxy between the bridge and GPUStack's server that answers chosen writes with
an error (standard library only: one thread per connection).

Every request is forwarded to the server as it came, and the answer passed back as it arrives
(a watch's stream too, chunk by chunk), except the bridge's row writes of a model given a
:class:`Faults` plan — its instances' ``PUT /v2/model-instances/<id>`` (placements), or the
model's own ``PUT /v2/models/<id>`` (the evaluation) —: the n-th write of each row is answered
with the plan's n-th :class:`Fault`, then with ``then`` once the list is used up (forwarded
when there is none). A fault answers without forwarding (the
server never sees the write), or with ``forward`` after forwarding it (the write landed, the
answer says it failed, as a gateway that timed out does). The error body is GPUStack's own
shape (``{"code", "reason", "message"}``, ``gpustack/api/exceptions.py: ErrorResponse``).

Every row write is recorded (:class:`Write`). Each answer closes its connection
(``HTTP/1.0``); the bridge's client opens the next one.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

#: Bytes passed on per read of an answer.
CHUNK = 65536
#: Headers of one hop, never passed on (RFC 9110 §7.6.1; the body is re-framed by the close).
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}
)
ROW_WRITE = re.compile(r"^/v2/(?P<kind>model-instances|models)/(?P<id>[0-9]+)$")
INSTANCES = "model-instances"
#: GPUStack's ``reason`` for the statuses the tests inject.
REASONS = {
    409: "AlreadyExists",
    422: "Invalid",
    500: "InternalServerError",
    502: "BadGateway",
    503: "ServiceUnavailable",
}


@dataclass(frozen=True)
class Fault:
    """An error answer; ``forward``: after forwarding the write (it landed)."""

    status: int
    forward: bool = False


@dataclass(frozen=True)
class Faults:
    """The answers to each row's writes: ``first`` in order, then ``then`` (None: forward)."""

    first: tuple[Fault, ...] = ()
    then: Fault | None = None

    def at(self, n: int) -> Fault | None:
        """The fault for a row's ``n``-th write (0-based), None to forward it."""
        return self.first[n] if n < len(self.first) else self.then


@dataclass(frozen=True)
class Write:
    """One row write the proxy saw: the status the bridge got, and whether the server saw it."""

    kind: str
    row_id: int
    model_name: str
    status: int
    landed: bool


@dataclass
class FaultProxy:
    """Forwards ``127.0.0.1:<port>`` to the GPUStack server at ``upstream`` (``http://host:port``)."""

    upstream: str
    plans: dict[tuple[str, str], Faults] = field(default_factory=dict)
    writes: list[Write] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _open: set[http.client.HTTPConnection] = field(default_factory=set)

    def start(self) -> FaultProxy:
        handler = type("Handler", (_Relay,), {"proxy": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True).start()
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def plan(self, model_name: str, faults: Faults, kind: str = INSTANCES) -> None:
        """Answer the writes of ``model_name``'s instances (``kind`` ``models``: of the model row
        itself) by ``faults`` from now on."""
        with self._lock:
            self.plans[(kind, model_name)] = faults

    def statuses(self, row_id: int, kind: str = INSTANCES) -> list[int]:
        """The statuses the bridge got for its writes of one row, in order."""
        with self._lock:
            return [w.status for w in self.writes if (w.kind, w.row_id) == (kind, row_id)]

    def stop(self) -> None:
        """Stop accepting, and end every answer still streaming (the watches)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        with self._lock:
            connections = list(self._open)
        for connection in connections:  # each relay's thread sees its stream end and closes it
            sock = connection.sock  # None once its relay closed it
            try:
                if sock is not None:
                    sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # ------------------------------------------------------------- internals
    def fault_for(self, method: str, path: str, body: bytes) -> tuple[Write, Fault | None] | None:
        """For a row write: the write (its status still 0) and its fault (None: forward); else None."""
        match = ROW_WRITE.match(path)
        if method != "PUT" or match is None:
            return None
        kind, row_id = match["kind"], int(match["id"])
        name = str(json.loads(body or b"{}").get("model_name" if kind == INSTANCES else "name", ""))
        with self._lock:
            seen = sum(1 for w in self.writes if (w.kind, w.row_id) == (kind, row_id))
            plan = self.plans.get((kind, name))
        return Write(kind, row_id, name, 0, False), plan.at(seen) if plan is not None else None

    def record(self, write: Write) -> None:
        with self._lock:
            self.writes.append(write)

    def connect(self) -> http.client.HTTPConnection:
        parts = urlsplit(self.upstream)
        connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=120)
        with self._lock:
            self._open.add(connection)
        return connection

    def release(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            self._open.discard(connection)
        connection.close()


class _Relay(BaseHTTPRequestHandler):
    """One request: forwarded, or answered with its fault."""

    proxy: FaultProxy

    def do_GET(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        write, fault = self.proxy.fault_for(self.command, self.path, body) or (None, None)
        if fault is None:
            self._relay(body, write=write)
            return
        if fault.forward:
            self._relay(body, write=None, answer=False)
        if write is not None:  # recorded before the bridge has its answer, as a forwarded write is
            self.proxy.record(replace(write, status=fault.status, landed=fault.forward))
        self._error(fault.status)

    do_PUT = do_POST = do_DELETE = do_PATCH = do_GET

    def _relay(self, body: bytes, *, write: Write | None, answer: bool = True) -> None:
        """Send the request on; pass the answer back when ``answer`` (else read and drop it). A
        ``write`` is recorded with the server's status before the bridge sees it, so a test that
        waits on what the bridge did next finds it recorded."""
        upstream = self.proxy.connect()
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            upstream.request(self.command, self.path, body=body or None, headers=headers)
            response = upstream.getresponse()
            if write is not None:
                self.proxy.record(replace(write, status=response.status, landed=True))
            if answer:
                self._pass_back(response)
            else:
                response.read()
        finally:
            self.proxy.release(upstream)

    def _pass_back(self, response: http.client.HTTPResponse) -> None:
        self.send_response_only(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in HOP_BY_HOP:
                self.send_header(key, value)
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            while chunk := response.read1(CHUNK):
                self.wfile.write(chunk)
        except (OSError, ValueError, http.client.HTTPException):
            pass  # the bridge hung up (a watch it closed), or stop() cut the stream mid-chunk

    def _error(self, status: int) -> None:
        reason = REASONS.get(status, "Error")
        text = f"injected by the test's proxy: {status} {reason}"
        body = json.dumps({"code": status, "reason": reason, "message": text}).encode()
        self.send_response_only(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass
