"""Stage 3's "largest group" bookkeeping (``single_worker.py: _track_failures``).

GPUStack walks the workers in order: each tracked group larger than the
tracker's (strictly) replaces it, and a worker without a candidate records the
failure message for the tracker's state, once per state. The stage computes
the same messages and the same final tracker from running maxima without
visiting every worker; this compares it with the walk written out.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from unittest import mock

from builders import H100, gpu, worker
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core import Reason, Worker
from scheduler_core.caching import Columns
from scheduler_core.outcomes import MAX_EXAMPLES, FailureTally
from scheduler_core.selection import DecisionLog
from scheduler_core.strategies import single_worker
from scheduler_core.workers import worker_view

_INPUTS = SimpleNamespace(
    gpu_type="cuda", vram_claim=1, utilization=None, ram_rule=SimpleNamespace(ram_for=lambda claims: None)
)

_entries = st.lists(
    st.tuples(
        st.integers(min_value=2, max_value=8),  # the worker's GPUs
        st.lists(st.tuples(st.integers(min_value=1, max_value=6), st.integers(min_value=2, max_value=8)),
                 max_size=3),  # tracked groups: (free VRAM, GPUs)
        st.booleans(),  # has a candidate
    ),
    max_size=30,
)


def _walk(log: DecisionLog, gpu_type: str, entries: list[Any], views: list[Any]) -> list[Any]:
    """The walk as GPUStack does it, recording (type, tracker state) for each message."""
    tracker = log.multi_gpu
    messages = []
    recorded = None
    for view, (_, tracked, has_candidate) in zip(views, entries, strict=True):
        for total, satisfied in tracked:
            if total > tracker.vram:
                tracker.vram, tracker.satisfied, tracker.total_gpus = total, satisfied, len(view.gpus)
        if not has_candidate and (tracker.vram, tracker.satisfied, tracker.total_gpus) != recorded:
            recorded = (tracker.vram, tracker.satisfied, tracker.total_gpus)
            messages.append((gpu_type, recorded))
    return messages


@settings(max_examples=300, deadline=None)
@given(first=_entries, second=_entries, start=st.integers(min_value=0, max_value=4))
def test_the_stage_records_what_the_walk_records(first: list[Any], second: list[Any], start: int) -> None:
    """Two GPU types in a row (the tracker carries over): the same messages in the same
    order, and the same final tracker, as the worker-by-worker walk."""
    expected_log, got_log = DecisionLog(), DecisionLog()
    expected_log.multi_gpu.vram = got_log.multi_gpu.vram = start
    expected: list[Any] = []
    got: list[Any] = []

    def record(selection: Any, gpu_type: str) -> Reason:
        tracker = selection.log.multi_gpu
        got.append((gpu_type, (tracker.vram, tracker.satisfied, tracker.total_gpus)))
        return Reason.INSUFFICIENT_VRAM

    tally = FailureTally("single_worker_multi_gpu")
    failing: set[int] = set()
    met: dict[int, str] = {}  # the failing workers in the walk's order, first meeting kept

    with mock.patch.object(single_worker, "_record_failure", record):
        for gpu_type, entries in (("cuda", first), ("rocm", second)):
            views = [
                worker_view(Worker.model_validate(worker(n, f"w{n}", [gpu(i, H100) for i in range(count)])))
                for n, (count, _, _) in enumerate(entries, start=1)
            ]
            outcomes = [
                single_worker._candidate(  # type: ignore[arg-type]
                    _INPUTS, view, single_worker._WorkerOutcome(tuple(tracked), {0: 1} if has else None)
                )
                for view, (_, tracked, has) in zip(views, entries, strict=True)
            ]
            expected += _walk(expected_log, gpu_type, entries, views)
            found = [outcome.candidate for outcome in outcomes]
            runs = [outcome.run for outcome in outcomes]
            peaks = [outcome.peak_total for outcome in outcomes]
            ran = list(zip(views, outcomes, strict=True))
            columns = Columns(ran, (found, runs, peaks), None, 0)  # no memo: nothing kept
            failed = single_worker._Failed(tally, ran)
            single_worker._track_failures(SimpleNamespace(log=got_log), gpu_type, columns, failed)  # type: ignore[arg-type]
            failing |= {view.id for view, (_, _, has) in zip(views, entries, strict=True) if not has}
            for view, (_, _, has) in zip(views, entries, strict=True):
                if not has:
                    met.setdefault(view.id, view.name)
    assert got == expected
    # every worker without a candidate is tallied once (the two types' workers share ids)
    failures = tally.outcome(()).failures
    assert sum(f.workers for f in failures) == len(failing)
    if len(failures) == 1:  # one reason: its examples are the first failing workers met
        assert failures[0].examples == tuple(met.items())[:MAX_EXAMPLES]
    assert got_log.multi_gpu == expected_log.multi_gpu


@settings(max_examples=500, deadline=None)
@given(
    peaks=st.lists(st.integers(min_value=0, max_value=6), max_size=40),
    rewrites=st.lists(
        st.tuples(st.integers(min_value=0, max_value=39), st.integers(min_value=0, max_value=6)), max_size=6
    ),
    start=st.integers(min_value=0, max_value=3),
)
def test_patched_records_are_the_records_of_the_rewritten_peaks(
    peaks: list[int], rewrites: list[tuple[int, int]], start: int
) -> None:
    """A kept list of records brought up to date after peaks are rewritten (a booking lowers
    a worker's peak, a release raises it; anywhere in the run, records included) equals the
    records found again from scratch."""
    kept = single_worker._record_breakers(peaks, start)
    positions = sorted({position for position, _ in rewrites if position < len(peaks)})
    for position, value in rewrites:
        if position < len(peaks):
            peaks[position] = value
    single_worker._patch_breakers(kept, peaks, start, positions)
    assert kept == single_worker._record_breakers(peaks, start)
