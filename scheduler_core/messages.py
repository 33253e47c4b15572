"""GPUStack's user-facing texts that are not any one strategy's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler_core._units import byte_to_gib
from scheduler_core.events import list_message

if TYPE_CHECKING:
    from scheduler_core.selection import Selection

#: GPUStack's state-message header for an instance that could not be placed
#: (``scheduler/scheduler.py: _schedule_one``).
NO_SUITABLE_WORKERS = "No suitable workers.\nDetails:\n"
#: GPUStack's text when the selector produced no message of its own.
NO_RESOURCE_FIT = "No workers meet the resource requirements."


def default_message(selection: Selection) -> str:
    """The estimate headline GPUStack records first (``select_candidates``)."""
    head = f"The model requires approximately {byte_to_gib(selection.vram_claim)} GiB of VRAM"
    if selection.ram_claim > 0:
        head += f" and {byte_to_gib(selection.ram_claim)} GiB of RAM"
    lines = [head + "."]
    highest = max(selection.mfs_by_type.values()) if selection.mfs_by_type else 0
    if highest != 0 and not selection.is_diffusion:
        lines.append(
            f"With --mem-fraction-static={highest}, all GPUs combined need to provide at least "
            f"{byte_to_gib(int(selection.vram_claim / highest))} GiB of total VRAM and each GPU "
            f"needs {int(highest * 100)}% of allocatable VRAM."
        )
    return list_message(lines)
