"""The curated public API of scheduler_core (httpx-style pin)."""

from __future__ import annotations

import scheduler_core


def test_public_names_are_pinned():
    """Changing the public surface is a deliberate act: update this list with it."""
    assert sorted(scheduler_core.__all__) == [
        "CandidateOut",
        "Chain",
        "DEFAULT_CHAIN",
        "ErrorOut",
        "EstimateOut",
        "EventOut",
        "LaunchOut",
        "ModelInstance",
        "ModelSpec",
        "ScheduleRequest",
        "ScheduleResult",
        "SnapshotMemo",
        "TuneRequest",
        "TuneResult",
        "WORKER_STATES",
        "Worker",
        "canonical_json",
        "schedule",
        "tune",
    ]
    for name in scheduler_core.__all__:
        assert getattr(scheduler_core, name) is not None
