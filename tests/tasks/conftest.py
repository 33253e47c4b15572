"""An empty deployment on fakeredis (``h``) for the tests of ``tasks/`` (the runtime tests have their own)."""

from __future__ import annotations

import pytest

from tasks.testing import Harness


@pytest.fixture
def h() -> Harness:
    """A fresh harness: no worker, no request."""
    return Harness()
