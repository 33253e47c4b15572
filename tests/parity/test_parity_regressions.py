"""Shrunk parity cases: each request decided by ``schedule()`` must give GPUStack's recorded result.

Every ``regressions/*.json`` was produced by ``python -m tests.parity.run
--record`` from a generated request on which gpusched and GPUStack's own code
(GPUStack 2.2.3 = commit 47277d79, run by tools/gpustack-oracle) differed; ``expected`` is the
oracle's comparable result and ``rule`` says what the case pins. No oracle is
needed here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.parity.regressions_io import REGRESSIONS, case_files, load, mismatch

CASES = case_files(REGRESSIONS)


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_regression_case_matches_gpustack(path: Path) -> None:
    case = load(path)
    assert case["rule"], "a case says what it pins"
    assert mismatch(case) == [], case["rule"]
