"""The curated public API of scheduler_core (httpx-style pin)."""

from __future__ import annotations

import types

import scheduler_core

PUBLIC = [
    "DEFAULT_CHAIN",
    "EMPTY_KEY",
    "FILTERS_BY_NAME",
    "MORE_CAPACITY",
    "STRATEGIES_BY_NAME",
    "WORKER_STATES",
    "CandidateOut",
    "Chain",
    "ClusterChange",
    "CycleState",
    "Decided",
    "ErrorOut",
    "EstimateOut",
    "EventOut",
    "Gpu",
    "GpuId",
    "LaunchOut",
    "ModelInstance",
    "ModelSpec",
    "GpuFloor",
    "PolicySettings",
    "Problem",
    "PreciseSettings",
    "Reason",
    "RequestError",
    "ScheduleRequest",
    "ScheduleResult",
    "SnapshotMemo",
    "TuneRequest",
    "TuneResult",
    "UNHASHABLE_REQUEST_ID",
    "Worker",
    "canonical_json",
    "decide",
    "deciding",
    "dotted_field",
    "first_problem",
    "chain_of",
    "chain_wake_table",
    "encodable",
    "evaluated_gpus_per_replica",
    "extended",
    "gpu_capacity",
    "instance_claims",
    "occupied_workers",
    "parse_gpu_id",
    "parse_request",
    "render_text",
    "render_value",
    "request_field",
    "request_id_for",
    "schedule",
    "selected_worker_names",
    "tune",
    "wake_floor",
    "worker_admits",
]


def test_public_names_are_pinned():
    """Changing the public surface is a deliberate act: update this list with it."""
    assert sorted(scheduler_core.__all__) == sorted(PUBLIC)
    for name in scheduler_core.__all__:
        assert getattr(scheduler_core, name) is not None


def test_nothing_public_leaks_beyond_all():
    """Every public, non-module attribute of the package is in ``__all__`` (httpx's leak check)."""
    leaked = {
        name
        for name, value in vars(scheduler_core).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert leaked - {"annotations"} == set(scheduler_core.__all__)


def test_schedule_pauses_the_collector_while_it_decides_and_restores_it():
    """``schedule()`` decides with the garbage collector paused and leaves it as it found it
    (on, or off when its caller had turned it off); ``deciding()`` does the same around a
    long-lived caller's decisions, nested too."""
    import gc

    from builders import RTX_4090, model, request, uniform_worker

    seen = []
    real = scheduler_core.decision._schedule

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    raw = request(model(), [uniform_worker(1, "a", 1, RTX_4090)])
    assert gc.isenabled()
    scheduler_core.decision._schedule = spy
    try:
        scheduler_core.schedule(raw)
        assert gc.isenabled()
        with scheduler_core.deciding():
            scheduler_core.schedule(raw)
            with scheduler_core.deciding():
                pass
            assert not gc.isenabled()
        gc.disable()
        scheduler_core.schedule(raw)
        assert not gc.isenabled()  # the caller's own setting stays
        gc.enable()
    finally:
        gc.enable()
        scheduler_core.decision._schedule = real
    assert seen == [False, False, False] and gc.isenabled()
