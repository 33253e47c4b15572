"""The client: waits return only published results, never hang on a half-open connection."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest
from builders import GIB, RTX_4090, instance, uniform_worker
from service_builders import small_request

from tasks.decision.decide import decide
from tasks.edges import client as client_module
from tasks.edges.client import ServiceClient, WaitTimeout
from tasks.state.context import BLOCK_MARGIN_S, redis_client
from tasks.testing import Harness, isolated_settings


def test_client_wait_returns_only_published_results() -> None:
    h = Harness(settings=isolated_settings(decide_lock=False))
    h.apply(
        {
            "workers": [uniform_worker(1, "w1", 1, RTX_4090)],
            "model_instances": [instance(7, 1, {0: RTX_4090 - GIB})],
        }
    )
    h.submit(small_request("a"))
    h.pump()
    client = ServiceClient.__new__(ServiceClient)
    client.rt = h.rt
    notice = client.stored_result("a")
    assert notice is not None and notice["status"] == "unschedulable"
    h.event({"kind": "instance_deleted", "instance_id": 7})
    item = h.queue.popleft()
    decide(h.rt, item.request_id, item.seq, item.attempt, "t")  # decided, not published
    assert h.record("a")["state"] == "decided"
    assert client.stored_result("a") == notice  # the published notice, not the new decision
    assert client.stored_result("a", terminal=True) is None
    h.pump()
    h.queue.append(item)
    h.pump()
    final = client.stored_result("a", terminal=True)
    assert final is not None and final["status"] == "scheduled"


def test_the_module_level_submit_takes_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    class Recording:
        def submit(self, request: Any, **kwargs: Any) -> dict[str, Any]:
            seen.update(kwargs)
            return {"status": "scheduled"}

    monkeypatch.setattr(client_module, "default_client", Recording)
    assert client_module.submit({"request_id": "r"}, wait=True, terminal=True) == {"status": "scheduled"}
    assert seen == {"wait": True, "timeout": 30.0, "terminal": True}


def test_a_half_open_connection_cannot_hang_wait() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(listener.accept()[0]), daemon=True).start()
    h = Harness()
    client = ServiceClient.__new__(ServiceClient)
    client.rt = h.rt
    settings_ = isolated_settings(redis_url=f"redis://127.0.0.1:{listener.getsockname()[1]}/0")
    client.settings = settings_
    client._blocking = redis_client(settings_, blocking=True, max_block_ms=200)  # never answers
    started = time.monotonic()
    with pytest.raises(WaitTimeout):
        client.wait("r", timeout=1.0)
    assert time.monotonic() - started < 1.0 + 0.2 + BLOCK_MARGIN_S + 1.0
    client._blocking.close()
    for sock in (*accepted, listener):
        sock.close()
