"""GPUStack's REST API, as the bridge uses it: list, watch, read and write rows.

The standard library's :mod:`http.client` is the transport (docs/gpustack.md says why: the
bridge needs a handful of JSON calls and one long-lived streaming read; ``http.client`` does
both, verifies TLS with :func:`ssl.create_default_context`, and adds no dependency to a
service that runs next to the scheduler's Redis credentials). One connection per thread is
kept alive between calls; a watch has a connection of its own.

Everything GPUStack sends is untrusted input: a response body is read up to
:data:`MAX_RESPONSE_BYTES`, a watch event up to :data:`MAX_EVENT_BYTES`, and a body that is
not JSON (or nested too deeply to decode) is a :class:`BadResponse`, never an exception the
caller did not ask for. The API key is sent as a Bearer token and appears in no message.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

#: Largest response body read (a list page of 100 workers is about 230 KB).
MAX_RESPONSE_BYTES = 32 << 20
#: Largest watch event (one row); a longer line ends the stream as a :class:`BadResponse`.
MAX_EVENT_BYTES = 4 << 20
#: Rows per list page (GPUStack's ``perPage``).
PAGE_SIZE = 100
#: Most list pages followed (100,000 rows).
MAX_PAGES = 1000
#: A watch that sends nothing (GPUStack sends a bare ``\n\n`` heartbeat every few seconds)
#: for this long is treated as cut.
WATCH_IDLE_S = 60.0
#: An error body is quoted up to this many characters.
EXCERPT_CHARS = 300
#: The three kinds of rows the bridge follows (``/v2/<kind>``).
KINDS = ("workers", "models", "model-instances")


class GpustackError(Exception):
    """A call to GPUStack failed; ``retryable`` says whether trying again later can help."""

    retryable = True


class Unreachable(GpustackError):
    """No answer: connection refused or reset, a timeout, a TLS failure."""


class HttpStatus(GpustackError):
    """GPUStack answered with an error status."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:EXCERPT_CHARS]}")
        self.status = status
        self.body = body[:EXCERPT_CHARS]
        # 5xx, 408 and 429 are the server's trouble; 409 a race another read resolves
        self.retryable = status >= 500 or status in (408, 409, 429)


class BadResponse(GpustackError):
    """An answer that is not what the API promises (not JSON, too large, wrong shape)."""

    retryable = False


class TlsRefused(Unreachable):
    """The server's certificate did not verify: retrying will not help until it is fixed."""

    retryable = False


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of ``?watch=true``: ``type`` 1 created, 2 updated, 3 deleted."""

    type: int
    row: dict[str, Any]
    changed: dict[str, Any]


#: The first item of every :meth:`GpustackApi.watch`: the stream is open.
OPENED = WatchEvent(0, {}, {})


def _decode(text: bytes, what: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise BadResponse(f"{what}: not JSON ({text[:80]!r})") from None


class GpustackApi:
    """A client for one GPUStack server (``base_url``: ``http(s)://host[:port][/prefix]``)."""

    def __init__(
        self, base_url: str, api_key: str | None, *, ca_file: str | None = None, timeout: float = 30.0
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        self.base_url = base_url.rstrip("/")
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._key = api_key
        self._timeout = timeout
        self._tls = ssl.create_default_context(cafile=ca_file) if parts.scheme == "https" else None
        self._local = threading.local()

    # ------------------------------------------------------------------ transport
    def _new_connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._tls is not None:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._tls)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _headers(self, body: bytes | None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        if body is not None:
            headers["Content-Type"] = "application/json"
        return headers

    def _send(
        self, connection: http.client.HTTPConnection, method: str, path: str, body: bytes | None
    ) -> http.client.HTTPResponse:
        try:
            connection.request(method, self._prefix + path, body=body, headers=self._headers(body))
            return connection.getresponse()
        except ssl.SSLCertVerificationError as error:
            connection.close()
            raise TlsRefused(
                f"{method} {path}: TLS certificate not verified: {error.verify_message}"
            ) from None
        except (OSError, http.client.HTTPException) as error:
            connection.close()
            raise Unreachable(f"{method} {path}: {type(error).__name__}: {error}") from None

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """One JSON call; the decoded answer (None for an empty body).

        Raises:
            Unreachable: no answer (retryable); TlsRefused when the certificate does not verify.
            HttpStatus: an error status (``retryable`` for 5xx, 408, 409, 429).
            BadResponse: an answer that is not JSON or is larger than :data:`MAX_RESPONSE_BYTES`.
        """
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = self._new_connection(self._timeout)
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        response = self._send(connection, method, path, data)
        try:
            raw = response.read(MAX_RESPONSE_BYTES + 1)
        except (OSError, http.client.HTTPException) as error:
            connection.close()
            raise Unreachable(f"{method} {path}: {type(error).__name__}: {error}") from None
        if len(raw) > MAX_RESPONSE_BYTES:
            connection.close()
            raise BadResponse(f"{method} {path}: answer larger than {MAX_RESPONSE_BYTES} bytes")
        if response.status >= 400:
            raise HttpStatus(method, path, response.status, raw.decode("utf-8", "replace"))
        return _decode(raw, f"{method} {path}") if raw.strip() else None

    def close(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None

    # ------------------------------------------------------------------ rows
    def list_rows(self, kind: str, **params: Any) -> list[dict[str, Any]]:
        """Every row of ``/v2/<kind>`` (all pages, :data:`PAGE_SIZE` at a time).

        Raises:
            BadResponse: a page without an ``items`` list, or more than :data:`MAX_PAGES` pages.
        """
        rows: list[dict[str, Any]] = []
        for page in range(1, MAX_PAGES + 1):
            query = urlencode({**params, "page": page, "perPage": PAGE_SIZE})
            answer = self.call("GET", f"/v2/{kind}?{query}")
            items = answer.get("items") if isinstance(answer, dict) else None
            if not isinstance(items, list):
                raise BadResponse(f"GET /v2/{kind}: no items list")
            rows.extend(item for item in items if isinstance(item, dict))
            pages = (answer.get("pagination") or {}).get("totalPage")
            if not items or not isinstance(pages, int) or page >= pages:
                return rows
        raise BadResponse(f"GET /v2/{kind}: more than {MAX_PAGES} pages")

    def get_row(self, kind: str, row_id: int) -> dict[str, Any] | None:
        """One row, or None when GPUStack has none with that id (404)."""
        try:
            answer = self.call("GET", f"/v2/{kind}/{int(row_id)}")
        except HttpStatus as error:
            if error.status == 404:
                return None
            raise
        if not isinstance(answer, dict):
            raise BadResponse(f"GET /v2/{kind}/{row_id}: not an object")
        return answer

    def put_row(self, kind: str, row_id: int, body: dict[str, Any]) -> dict[str, Any]:
        """``PUT /v2/<kind>/<id>`` (GPUStack applies the fields present)."""
        answer = self.call("PUT", f"/v2/{kind}/{int(row_id)}", body)
        return answer if isinstance(answer, dict) else {}

    def plugin_status(self) -> dict[str, Any] | None:
        """The gpusched plugin's ``GET /gpusched/plugin``, or None when no plugin serves it."""
        try:
            answer = self.call("GET", "/gpusched/plugin")
        except HttpStatus as error:
            if error.status in (401, 403, 404):
                return None
            raise
        return answer if isinstance(answer, dict) else None

    # ------------------------------------------------------------------ watch
    def watch(self, kind: str, stop: threading.Event | None = None) -> Iterator[WatchEvent]:
        """Follow ``/v2/<kind>?watch=true`` until the stream ends (then it simply returns).

        GPUStack replays every existing row as ``type 1`` on connect and has no resume token;
        the caller re-lists and diffs after a reconnect. The first item is :data:`OPENED` (the
        server answered), then the events; events that are not objects with an integer
        ``type`` and an object ``data`` are skipped.

        Raises:
            Unreachable, HttpStatus, BadResponse: as :meth:`call`; BadResponse also for an event
                longer than :data:`MAX_EVENT_BYTES`.
        """
        connection = self._new_connection(WATCH_IDLE_S)
        response = self._send(connection, "GET", f"/v2/{kind}?watch=true", None)
        try:
            if response.status >= 400:
                raise HttpStatus(
                    "GET",
                    f"/v2/{kind}?watch=true",
                    response.status,
                    response.read(EXCERPT_CHARS).decode("utf-8", "replace"),
                )
            yield OPENED
            while stop is None or not stop.is_set():
                line = self._read_line(response, kind)
                if line is None:
                    return
                event = self._event(line, kind)
                if event is not None:
                    yield event
        finally:
            connection.close()

    @staticmethod
    def _read_line(response: http.client.HTTPResponse, kind: str) -> bytes | None:
        try:
            while True:
                line = response.readline(MAX_EVENT_BYTES + 1)
                if not line:
                    return None
                if len(line) > MAX_EVENT_BYTES:
                    raise BadResponse(f"watch {kind}: an event larger than {MAX_EVENT_BYTES} bytes")
                if line.strip():
                    return line
        except (TimeoutError, OSError, http.client.HTTPException) as error:
            raise Unreachable(f"watch {kind}: {type(error).__name__}: {error}") from None

    @staticmethod
    def _event(line: bytes, kind: str) -> WatchEvent | None:
        value = _decode(line, f"watch {kind}")
        if not isinstance(value, dict):
            return None
        kind_code, row = value.get("type"), value.get("data")
        if not isinstance(kind_code, int) or isinstance(kind_code, bool) or not isinstance(row, dict):
            return None
        changed = value.get("changed_fields")
        return WatchEvent(kind_code, row, changed if isinstance(changed, dict) else {})
