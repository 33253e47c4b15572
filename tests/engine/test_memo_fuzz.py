"""The decider's memo against the core deciding alone, at the sizes where its kept state matters.

``bench/fuzz_memo.py`` runs seeds for as long as it is given; here a few fixed rounds of it
(a few hundred workers, hundreds of decisions with bookings, releases, replaced, lost and
joining workers, snapshots validated again, replicas, ``policy: precise``), so the suite
fails on a kept stage run, standing or ranking that a larger cluster reaches and the
property tests' small clusters do not.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import fuzz_memo  # a script of bench/, not a package

from scheduler_core import DEFAULT_CHAIN


@pytest.mark.parametrize(
    ("seed", "workers", "chain"),
    [(7, 300, "service"), (4, 120, "service, 3 shown"), (18, 120, "default")],
)
def test_memo_decides_as_the_core_alone_through_a_long_run(seed: int, workers: int, chain: str) -> None:
    chains = fuzz_memo.chains()
    decided, scheduled = fuzz_memo.fuzz_round(seed, workers, 160, chains[chain])
    assert decided == 160
    assert 40 <= scheduled < decided  # the cluster took bookings and also refused some
    assert chains["default"] is DEFAULT_CHAIN
