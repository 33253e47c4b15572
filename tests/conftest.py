"""Suite-wide hooks: how ``make test`` spreads the suite over pytest-xdist processes."""

from __future__ import annotations

from typing import Any

import pytest

#: Tests that must run in one process under xdist, each prefix one work unit: the GPUStack
#: bridge's tests share one pair of GPUStack servers per session (tests/gpustack_bridge/conftest.py),
#: and the packaging tests one wheel built in the source tree's build/ (two processes building it
#: at once collide there: "File exists: build/bdist.linux-x86_64/wheel/gpusched-0.1.0.dist-info").
ONE_PROCESS = ("tests/gpustack_bridge/", "tests/test_packaging.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Load scheduling, test by test, except the tests of each :data:`ONE_PROCESS` prefix.

    xdist's own ``--dist loadgroup`` does not group here (pytest 9.2, xdist 3.8: two tests
    marked with one ``xdist_group`` ran in two processes), so the grouping is this scheduler's.
    """
    from xdist.scheduler import LoadScopeScheduling

    class SharedServersTogether(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return next((prefix for prefix in ONE_PROCESS if nodeid.startswith(prefix)), nodeid)

    return SharedServersTogether(config, log)
