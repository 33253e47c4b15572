"""Which freed GPUs could unblock a parked ``policy: precise`` request (its wake answer).

GPUStack's strategies skip a GPU whose allocatable share is below its type's
fraction (:func:`scheduler_core.plugins.free_share_floor`). The precise rules
have no such per-type share; what they do have is a floor in bytes
(:mod:`scheduler_core.precise.fit`): SGLang measures ``pre = free − context``
on every rank, the rank's weights ``W`` must load into it and the KV pool
``f × pre − W`` must be positive with ``f < 1``, so every GPU of a candidate
offers more than ``context + W`` (diffusion: the whole weights plus the
context on every GPU, more still). ``W`` is the fullest rank's share of the
weights; SGLang may hold fewer bytes than the checkpoint (a float32
checkpoint runs in 16 bits, half its bytes; MTP layers it does not build), so
the bound counts a quarter of an even split over the most ranks the request
could launch with: ``context + ⌈weights / (4 × ranks)⌉``. Freeing claims can
unblock the request only on a GPU that reaches it; the bound never rules out
a GPU the rules would use. Issue 21 formalises this per strategy
(``could_clear``).
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler_core._schemas import ModelSpec, ScheduleResult, Worker
from scheduler_core.params import BackendParameters
from scheduler_core.precise.facts import _DP, _PP, _TP
from scheduler_core.precise.multi_worker import MAX_AUTO_GPUS_PER_NODE, MAX_AUTO_NODES
from scheduler_core.precise.settings import PreciseSettings

#: The fullest rank holds at least this fraction's inverse of an even split (16-bit runs of a
#: float32 checkpoint halve it; what SGLang leaves out, MTP layers, takes less than the other half).
_WEIGHT_SHARE_DIVISOR = 4


def least_gpu_bytes(
    model: ModelSpec, result: ScheduleResult, settings: PreciseSettings, workers: Sequence[Worker]
) -> int | None:
    """The allocatable bytes below which a GPU is part of no precise candidate of ``model``.

    Args:
        model: the request's model (its parallel sizes, its manual selection).
        result: the decision that parked it (its estimate's weights).
        settings: the chain's precise settings (SGLang's context per GPU).
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
    return settings.sglang_context + -(-(estimate.weight_bytes or 0) // (_WEIGHT_SHARE_DIVISOR * ranks))


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
    return len(worker.gpus)
