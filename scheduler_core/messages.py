"""GPUStack's user-facing texts that are not any one strategy's."""

from __future__ import annotations

from scheduler_core._units import byte_to_gib
from scheduler_core.events import list_message
from scheduler_core.selection import Selection, effective_vram

#: GPUStack's state-message header for an instance that could not be placed
#: (``scheduler/scheduler.py: _schedule_one``).
NO_SUITABLE_WORKERS = "No suitable workers.\nDetails:\n"
#: GPUStack's state message when the cluster has no worker at all (``_schedule_one``).
NO_AVAILABLE_WORKERS = "No available workers"
#: GPUStack's text when the selector produced no message of its own.
NO_RESOURCE_FIT = "No workers meet the resource requirements."


#: Warning when the estimate had no weight size to go on (GPUStack counts such weights as 0).
UNKNOWN_WEIGHT_SIZE = (
    "The model's weight size is unknown (no weight_bytes, no readable local_path): its weights "
    "count as 0 bytes in the VRAM estimate, as GPUStack counts them. The estimate is a guess; "
    "give weight_bytes to size the placement."
)


def default_message(selection: Selection) -> str:
    """The estimate headline GPUStack records first (``select_candidates``; each other
    policy states its own, :attr:`scheduler_core.framework.Policy.headline`)."""
    head = f"The model requires approximately {byte_to_gib(selection.vram_claim)} GiB of VRAM"
    if selection.ram_claim > 0:
        head += f" and {byte_to_gib(selection.ram_claim)} GiB of RAM"
    lines = [head + "."]
    highest = max(selection.mfs_by_type.values()) if selection.mfs_by_type else 0
    if highest != 0 and not selection.is_diffusion:
        lines.append(
            f"With --mem-fraction-static={highest}, all GPUs combined need to provide at least "
            f"{byte_to_gib(int(effective_vram(selection.vram_claim, highest, False)))} GiB of total VRAM "
            "and each GPU "
            f"needs {int(highest * 100)}% of allocatable VRAM."
        )
    return list_message(lines)
