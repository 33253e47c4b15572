"""Launch arguments for the selected candidate (GPUStack ``worker/backends/sglang.py``).

GPUStack passes the user's flags through, adds ``--tp-size``/``--pp-size`` when
the user set no parallelism (one worker: tp = its GPU count; several workers:
tp = GPUs per node and pp = nodes when every node has the same count, else
tp 1 and pp = all GPUs), and injects the booked fraction as
``--mem-fraction-static`` unless the user set one. Distributed candidates get
per-node ``--nnodes``/``--node-rank``/``--dist-init-addr``.
"""

from __future__ import annotations

from scheduler_core._schemas import LaunchNodeOut, LaunchOut
from scheduler_core.candidates import Candidate
from scheduler_core.params import BackendParameters

#: Port on the leader for torch.distributed rendezvous (PyTorch's conventional default);
#: a user-supplied ``--dist-init-addr`` replaces it.
DIST_INIT_PORT = 29500

_PARALLEL_FLAGS = (
    "tp-size",
    "tensor-parallel-size",
    "pp-size",
    "pipeline-parallel-size",
    "dp-size",
    "data-parallel-size",
)


def parallelism(candidate: Candidate) -> tuple[int, int]:
    """``(tp, pp)`` GPUStack derives for the candidate's GPUs."""
    counts = [len(candidate.gpu_indexes), *(len(s.gpu_indexes) for s in candidate.subordinates)]
    if len(counts) == 1:
        return counts[0], 1
    if len(set(counts)) == 1:
        return counts[0], len(counts)
    return 1, sum(counts)


def _fraction(candidate: Candidate) -> float | None:
    for claim in (candidate.claim, *(s.claim for s in candidate.subordinates)):
        if claim.vram_utilization:
            return claim.vram_utilization
    return None


def _derived_flags(params: BackendParameters, candidate: Candidate) -> list[str]:
    flags: list[str] = []
    if not params.has(_PARALLEL_FLAGS):
        tp, pp = parallelism(candidate)
        if tp > 1:
            flags += ["--tp-size", str(tp)]
        if pp > 1:
            flags += ["--pp-size", str(pp)]
    fraction = _fraction(candidate)
    if fraction and not params.has(["mem-fraction-static"]):
        flags += ["--mem-fraction-static", str(fraction)]
    return flags


def _node_flags(params: BackendParameters, candidate: Candidate, rank: int) -> list[str]:
    flags: list[str] = []
    nodes = 1 + len(candidate.subordinates)
    if not params.has(["nnodes"]):
        flags += ["--nnodes", str(nodes)]
    if not params.has(["node-rank"]):
        flags += ["--node-rank", str(rank)]
    if not params.has(["dist-init-addr"]):
        leader = candidate.worker.ip or candidate.worker.name
        flags += ["--dist-init-addr", f"{leader}:{DIST_INIT_PORT}"]
    return flags


def launch_arguments(backend_parameters: list[str], candidate: Candidate) -> LaunchOut:
    """The SGLang arguments to start ``candidate`` (user flags first, derived flags after)."""
    params = BackendParameters(backend_parameters)
    # SGLang receives the flattened argv, as GPUStack's worker builds it (``worker/backends/base.py``).
    base = [*params.argv, *_derived_flags(params, candidate)]
    if not candidate.subordinates:
        return LaunchOut(backend_parameters=base)
    members = [candidate.worker, *(s.worker for s in candidate.subordinates)]
    nodes = [
        LaunchNodeOut(
            worker_id=worker.id,
            worker_name=worker.name,
            node_rank=rank,
            backend_parameters=base + _node_flags(params, candidate, rank),
        )
        for rank, worker in enumerate(members)
    ]
    return LaunchOut(backend_parameters=nodes[0].backend_parameters, nodes=nodes)
