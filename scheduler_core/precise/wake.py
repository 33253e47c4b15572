"""Which freed GPUs could unblock a parked ``policy: precise`` request (its wake answer).

GPUStack's strategies skip a GPU whose allocatable share is below its type's
fraction (:func:`scheduler_core.plugins.free_share_floor`). The precise rules
have no such per-type share; what they do have is a floor in bytes: every
rank's pool must hold the rank's weights and the runtime overhead
(``W + O + F ≤ f_eff × min U_g``, with ``f_eff ≤ 1`` and the usable memory
``U_g`` never above what the ledger leaves allocatable; diffusion holds the
whole weights on every GPU, more still). So a GPU whose allocatable memory is
below ``⌈weights / ranks⌉ + runtime_overhead`` for the most ranks the request
could launch with is part of no precise candidate, and freeing claims can
unblock the request only on a GPU that reaches it. The bound leaves out the
KV floor and the reserve (both ≥ 0), so it never rules out a GPU the rules
would use. Issue 21 formalises this per strategy (``could_clear``).
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler_core._schemas import ModelSpec, ScheduleResult, Worker
from scheduler_core.params import BackendParameters
from scheduler_core.precise.facts import _DP, _PP, _TP
from scheduler_core.precise.multi_worker import MAX_AUTO_GPUS_PER_NODE, MAX_AUTO_NODES
from scheduler_core.precise.settings import PreciseSettings


def least_gpu_bytes(
    model: ModelSpec, result: ScheduleResult, settings: PreciseSettings, workers: Sequence[Worker]
) -> int | None:
    """The allocatable bytes below which a GPU is part of no precise candidate of ``model``.

    Args:
        model: the request's model (its parallel sizes, its manual selection).
        result: the decision that parked it (its estimate's weights).
        settings: the chain's precise settings (the runtime overhead per rank).
        workers: the cluster the decision saw (bounds the ranks of an automatic tp/pp:
            a worker's GPUs on one worker, nodes × GPUs per node across workers).

    Returns:
        The floor in bytes; None when none is known (not a precise decision, a
        rejected one, a manual GPU selection — its stage overcommits instead).
    """
    estimate = result.estimate
    if result.policy != "precise" or estimate is None or result.status == "rejected":
        return None
    if model.gpu_selector is not None and model.gpu_selector.gpu_ids:
        return None
    try:
        ranks = _most_ranks(model, workers)
    except ValueError:  # parameters the decision already refused: no floor to offer
        return None
    return -(-(estimate.weight_bytes or 0) // ranks) + settings.runtime_overhead


def _most_ranks(model: ModelSpec, workers: Sequence[Worker]) -> int:
    """The most tp × pp ranks the model could launch with on ``workers`` (≥ 1)."""
    params = BackendParameters(model.backend_parameters)
    tp, pp, dp = params.find_int(_TP), params.find_int(_PP), params.find_int(_DP)
    if tp or pp or dp:  # a world size: exactly the user's tp × pp
        return max((tp or 1) * (pp or 1), 1)
    widest = max((_gpu_count(worker) for worker in workers), default=1)
    if model.distributed_inference_across_workers is False:
        return max(widest, 1)
    spread = min(len(workers), MAX_AUTO_NODES) * min(widest, MAX_AUTO_GPUS_PER_NODE)
    return max(widest, spread, 1)


def _gpu_count(worker: Worker) -> int:
    return len((worker.status or {}).get("gpu_devices") or ())
