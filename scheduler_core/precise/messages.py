"""The precise rules' user-facing lines, in GPUStack's style (GiB with 2 decimals)."""

from __future__ import annotations

from scheduler_core._units import byte_to_gib
from scheduler_core.events import list_message
from scheduler_core.precise.facts import PreciseFacts
from scheduler_core.precise.fit import Miss
from scheduler_core.reasons import Reason


def _gpus(count: int) -> str:
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def requirement(facts: PreciseFacts, miss: Miss) -> str:
    """``The model needs 38.2 GiB per GPU at fraction 0.83 with a 8,192-token KV floor``."""
    if facts.diffusion:
        return f"The model needs {byte_to_gib(miss.need)} GiB per GPU for a full copy of its weights"
    fraction = "" if miss.fraction is None else f" at fraction {round(miss.fraction, 3)}"
    floor = f" with a {facts.floor_tokens:,}-token KV floor" if facts.kv is not None else ""
    return f"The model needs {byte_to_gib(miss.need)} GiB per GPU{fraction}{floor}"


def miss_line(facts: PreciseFacts, miss: Miss, where: str, gpus: int) -> str:
    """One failure line: the requirement, then what the best place provides and why it falls short."""
    head = requirement(facts, miss)
    if miss.reason is Reason.KV_TOKENS_BELOW_MINIMUM:
        return (
            f"{head}; {where} leaves {byte_to_gib(miss.usable)} GiB for the KV cache on {_gpus(gpus)}, "
            f"below the requested {facts.min_kv_tokens:,} KV tokens."
        )
    tail = {
        Reason.WEIGHTS_DO_NOT_FIT: "too little for SGLang's context and the weights of one rank",
        Reason.KV_FLOOR_NOT_MET: "too little for SGLang's context, the weights and the KV floor",
        Reason.INSUFFICIENT_VRAM: "too little for the memory the fraction books",
        Reason.NO_BALANCED_GPU_SET: "but its GPUs' free memory differs by more than SGLang's TP ranks accept",
    }.get(miss.reason, "too little")
    return f"{head}; {where} provides {byte_to_gib(miss.usable)} GiB free per GPU on {_gpus(gpus)}, {tail}."


def headline(facts: PreciseFacts) -> str:
    """The first message of a precise decision: the weights and the KV floor every rank needs
    (it replaces GPUStack's estimate headline)."""
    weights = "unknown weights (counted as 0)" if not facts.weight_known else (
        f"{byte_to_gib(facts.weight_bytes)} GiB of weights"
    )
    lines = [f"The model has {weights}; every data-parallel replica holds a full copy."]
    cell = facts.cell_bytes(1, 1)
    if cell is not None:
        lines.append(
            f"Each rank's pool must also hold a KV floor of {facts.floor_tokens:,} tokens "
            f"({round(cell / 1024, 2)} KiB per token without tensor parallelism)."
        )
    return list_message(lines)
