"""A one-worker deployment on fakeredis that the Celery tasks run against (``h``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from builders import RTX_4090, uniform_worker

from tasks.runtime import worker_tasks
from tasks.runtime.oom_watch import WATCH
from tasks.testing import Harness, isolated_settings


@pytest.fixture(autouse=True)
def clean_oom_watch() -> Iterator[None]:
    """The process-wide out-of-memory watch starts and ends every test empty."""
    WATCH.reset()
    yield
    WATCH.reset()


@pytest.fixture
def h(monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    """One 4090 worker; no back-off; two task errors before dead-lettering; tasks use its runtime."""
    harness = Harness(settings=isolated_settings(transient_backoff_s=0, max_task_errors=2))
    harness.apply({"workers": [uniform_worker(1, "w1", 1, RTX_4090)], "model_instances": []})
    monkeypatch.setattr(worker_tasks, "runtime", lambda: harness.rt)
    yield harness
