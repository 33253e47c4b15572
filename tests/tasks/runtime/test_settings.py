"""Settings: timing rules that would cause duplicate execution are refused; the environment is read."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tasks.runtime.settings import Settings


def test_settings_refuse_timings_that_cause_duplicate_execution() -> None:
    with pytest.raises(ValidationError, match="visibility_timeout"):
        Settings(visibility_timeout_s=60, task_time_limit_s=60, task_soft_time_limit_s=30)
    with pytest.raises(ValidationError, match="max_countdown_s"):
        Settings(visibility_timeout_s=10, task_time_limit_s=5, task_soft_time_limit_s=4, max_countdown_s=6)
    with pytest.raises(ValidationError, match="cluster id"):
        Settings(cluster="bad id")


def test_settings_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSCHED_REDIS_URL", "redis://example:6390/3")
    monkeypatch.setenv("GPUSCHED_CLUSTER", "c1")
    loaded = Settings()
    assert (loaded.redis_url, loaded.cluster) == ("redis://example:6390/3", "c1")
