"""The differential test itself: generated requests decided by gpusched and by GPUStack's code.

Marked ``parity`` and skipped unless ``PARITY=1`` (``make test`` never runs
it) or when the oracle's virtualenv is absent (``bash
tools/gpustack-oracle/setup.sh`` builds it; ``make parity`` does both and runs
``tests.parity.run``, which prints the same figures). ``PARITY_SCENARIOS``
(default 5000) scenarios are split over two seeds, plus examples/.
"""

from __future__ import annotations

import os

import pytest

from tests.parity.generator import example_scenarios, generate
from tests.parity.oracle_client import oracle_available, oracle_venv
from tests.parity.run import OraclePool, report, run

pytestmark = [
    pytest.mark.parity,
    pytest.mark.skipif(os.environ.get("PARITY") != "1", reason="set PARITY=1 (or run make parity)"),
    pytest.mark.skipif(not oracle_available(), reason=f"no oracle virtualenv at {oracle_venv()}"),
]


def test_no_difference_outside_the_deliberate_ones() -> None:
    total = int(os.environ.get("PARITY_SCENARIOS", "5000"))
    per_seed = (total + 1) // 2
    scenarios = [*example_scenarios(), *generate(1, per_seed), *generate(2, per_seed)]
    pool = OraclePool(2)
    try:
        summary = run(pool, scenarios)
    finally:
        pool.close()
    text = "\n".join(report(summary))
    print(text)
    decided, differing = len(summary.outcomes), summary.count("differ")
    assert decided == len(scenarios)
    assert differing == 0, text
