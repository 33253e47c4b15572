"""A small JSON-over-HTTP client for the tests' own calls to GPUStack (admin setup, synthetic workers).

Independent of the bridge's client on purpose: what the tests check must not be read back
through the code under test.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from typing import Any


class HttpError(RuntimeError):
    """A non-2xx answer (``status``, ``body``)."""

    def __init__(self, method: str, url: str, status: int, body: str) -> None:
        super().__init__(f"{method} {url}: {status} {body[:300]}")
        self.status = status
        self.body = body


def call(
    method: str,
    url: str,
    body: Any = None,
    *,
    token: str | None = None,
    basic: tuple[str, str] | None = None,
    timeout: float = 30.0,
) -> Any:
    """One request; the decoded JSON answer (None for an empty one).

    Raises:
        HttpError: the server answered with a status outside 2xx.
        OSError: the server could not be reached.
    """
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    elif basic:
        pair = base64.b64encode(f"{basic[0]}:{basic[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {pair}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode()
    except urllib.error.HTTPError as error:
        raise HttpError(method, url, error.code, error.read().decode(errors="replace")) from None
    return json.loads(text) if text.strip() else None
