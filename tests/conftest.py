"""Suite-wide hooks: how ``make test`` spreads the suite over pytest-xdist processes."""

from __future__ import annotations

from typing import Any

import pytest

#: Tests that share one pair of GPUStack servers per session (tests/gpustack_bridge/conftest.py):
#: under xdist they run in one process, so one pair is started, not one per process.
SHARED_SERVERS = "tests/gpustack_bridge/"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Load scheduling, test by test, except the GPUStack bridge's tests: one work unit.

    xdist's own ``--dist loadgroup`` does not group here (pytest 9.2, xdist 3.8: two tests
    marked with one ``xdist_group`` ran in two processes), so the grouping is this scheduler's.
    """
    from xdist.scheduler import LoadScopeScheduling

    class SharedServersTogether(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return SHARED_SERVERS if nodeid.startswith(SHARED_SERVERS) else nodeid

    return SharedServersTogether(config, log)
