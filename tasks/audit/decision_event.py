"""What ``sched.decision.made`` records: enough to replay the decision and explain it.

The event references its inputs instead of copying them: the request by its
digest (the request itself is in its ``sched.request.received`` event), the
cluster by its version (rebuilt by folding the change events,
:mod:`tasks.state.fold`) and the chain by its spec and digest. Its
``outcome`` summary is what ``gpusched replay`` diffs when a replay differs.
"""

from __future__ import annotations

from typing import Any

from scheduler_core import ScheduleResult
from tasks.base.digests import inputs_digest
from tasks.base.step import Step
from tasks.intake.requests import error_of


def outcome_summary(result: ScheduleResult) -> dict[str, Any]:
    """The part of a result a decision event keeps for audits and replay diffs."""
    selected = result.candidates[result.selected] if result.selected is not None else None
    return {
        "status": result.status,
        "selected": result.selected,
        "candidate_count": len(result.candidates),
        "selected_candidate": selected.model_dump(mode="json") if selected else None,
        "launch": result.launch.model_dump(mode="json") if result.launch else None,
        "estimate": result.estimate.model_dump(mode="json") if result.estimate else None,
        "error": error_of(result),
        "messages": list(result.messages),
        "filters": list(result.filter_messages),
        "strategies": [
            {"level": e.level, "action": e.action, "reason": e.reason} for e in result.events
        ],
        # additive: per strategy and reason, how many workers failed and the first few
        "failures": [f.model_dump(mode="json") for f in result.failures or ()],
    }


def decision_event_data(
    step: Step,
    request_digest: str,
    chain_spec: dict[str, Any],
    result: ScheduleResult,
    elapsed_ms: float,
    model_roots: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """The ``data`` of a ``sched.decision.made`` event.

    Args:
        step: the step the decision produced (its attempt, versions, action, reasons, result digest).
        request_digest: sha256 of the stored request.
        chain_spec: the chain spec with its ``digest`` (:attr:`LoadedChain.recorded_spec`).
        result: the core's result.
        elapsed_ms: snapshot sync plus core time.
        model_roots: the deciding worker's ``model_roots`` when the request names a local
            folder (its verdict is an input of the decision: replay checks the same roots);
            None leaves the key out.
    """
    data = {
        "seq": step.seq,
        "attempt": step.attempt,
        "cluster_version": step.version,
        "wake_epoch": step.epoch,
        "request_digest": request_digest,
        "inputs_digest": inputs_digest(request_digest, step.version, chain_spec["digest"]),
        "chain": chain_spec,
        "result_digest": step.result_digest,
        "action": step.action,
        "reasons": step.reasons,
        "outcome": outcome_summary(result),
        "elapsed_ms": elapsed_ms,
    }
    if model_roots is not None:
        data["model_roots"] = list(model_roots)
    return data
