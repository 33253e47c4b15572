"""``policy: precise`` as the registry knows it: its stages, scorer, headline and rules on ``replaces``."""

from __future__ import annotations

from scheduler_core.framework import Policy
from scheduler_core.precise.facts import facts_of
from scheduler_core.precise.messages import headline
from scheduler_core.precise.multi_worker import PreciseMultiWorker
from scheduler_core.precise.scoring import PreciseScorer
from scheduler_core.precise.single_worker import PreciseSingleWorker
from scheduler_core.selection import Selection
from scheduler_core.strategies.policy import MANUAL_STAGE


def _headline(selection: Selection) -> str:
    return headline(facts_of(selection))


#: GPUStack's manual stage (the user chose the GPUs), then one worker with sliding-window GPU
#: sets, then several partly used workers; the fragmentation-aware scorer; a fraction sized per
#: candidate; ``replaces`` leaves the replaced instance's claim out.
PRECISE_POLICY = Policy(
    name="precise",
    strategies=(MANUAL_STAGE, PreciseSingleWorker(), PreciseMultiWorker()),
    scorer=PreciseScorer(),
    headline=_headline,
    leaves_out_replaced=True,
    candidate_fraction=True,
)
