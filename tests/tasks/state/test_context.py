"""The runtime context: one per thread."""

from __future__ import annotations

import threading
from typing import Any


def test_each_thread_gets_its_own_runtime() -> None:
    from tasks.state.context import get_runtime, reset_runtime

    def noop(*_: Any) -> None:
        return None

    mine = get_runtime(noop, noop)
    assert get_runtime(noop, noop) is mine
    other: list[Any] = []
    thread = threading.Thread(target=lambda: other.append(get_runtime(noop, noop)))
    thread.start()
    thread.join()
    assert other[0] is not mine and other[0].mirror is not mine.mirror
    reset_runtime()
    assert get_runtime(noop, noop) is not mine
    reset_runtime()
