"""The offline part of ``make demo``: decide every example request in process and explain it."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable
from pathlib import Path

from scheduler_core import ScheduleResult, schedule

#: Where the example requests live (repository root / examples).
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
_GIB = 1 << 30


def _gib(value: int) -> str:
    return f"{value / _GIB:.2f} GiB"


def _claims(vram: dict[str, int]) -> str:
    return ", ".join(f"#{index}: {_gib(amount)}" for index, amount in vram.items())


#: The diffusion flags worth showing in a one-line plan summary.
_PLAN_FLAGS = (
    "use_fsdp_inference",
    "dit_cpu_offload",
    "layerwise_offload_components",
    "text_encoder_cpu_offload",
    "enable_cfg_parallel",
    "cfg_parallel_degree",
    "enable_torch_compile",
)


def _diffusion_lines(plan: dict[str, object]) -> list[str]:
    flags = plan.get("flags", {})
    assert isinstance(flags, dict)
    shown = ", ".join(f"{name}={flags.get(name)}" for name in _PLAN_FLAGS)
    return [
        f"  diffusion plan ({plan.get('pipeline_config_class')}, mode {plan.get('performance_mode')}, "
        f"{plan.get('num_gpus')} GPU): {shown}"
    ]


def describe(name: str, result: ScheduleResult) -> list[str]:
    """Readable lines for one decision."""
    lines = [f"■ {name}  →  {result.status.upper()}"]
    if result.estimate:
        fractions = ", ".join(f"{t} {f}" for t, f in result.estimate.mem_fraction_static.items()) or "n/a"
        weights = (
            _gib(result.estimate.weight_bytes) if result.estimate.weight_bytes is not None else "unknown"
        )
        lines.append(
            f"  needs {_gib(result.estimate.vram_bytes)} VRAM (weights {weights}, "
            f"{result.estimate.weight_source}); --mem-fraction-static by type: {fractions}"
        )
    if result.status == "scheduled" and result.selected is not None:
        chosen = result.candidates[result.selected]
        lines.append(
            f"  picked candidate {result.selected + 1}/{len(result.candidates)} (score {chosen.score:.2f}): "
            f"{chosen.worker_name} {chosen.gpu_type} GPUs {chosen.gpu_indexes}"
            + ("  [OVERCOMMIT]" if chosen.overcommit else "")
        )
        lines.append(f"    claims {_claims(chosen.computed_resource_claim.vram)}")
        for sub in chosen.subordinate_workers or ():
            lines.append(
                f"    + {sub.worker_name} GPUs {sub.gpu_indexes}: {_claims(sub.computed_resource_claim.vram)}"
            )
        if result.launch:
            lines.append(f"  launch: sglang {' '.join(result.launch.backend_parameters)}".rstrip())
            if result.launch.diffusion:
                lines.extend(_diffusion_lines(result.launch.diffusion))
    if result.status == "rejected" and result.error:
        lines.append(f"  error in {result.error.field}: {result.error.message}")
    text = result.state_message if result.status == "unschedulable" else "".join(result.messages)
    lines.extend("  │ " + line for line in (text or "").rstrip("\n").splitlines())
    return lines


def example_files(directory: Path = EXAMPLES) -> list[Path]:
    """Example request files, in name order."""
    return sorted(directory.glob("*.json"))


def run_offline_demo(files: Iterable[Path] | None = None) -> int:
    """Decide each example and print it; returns the number of decisions."""
    count = 0
    print("gpusched — offline placement decisions (scheduler_core.schedule, GPUStack policy)\n")
    for path in files if files is not None else example_files():
        result = schedule(json.loads(path.read_text(encoding="utf-8")))
        print("\n".join(describe(path.stem, result)))
        print()
        count += 1
    print(
        textwrap.fill(
            f"{count} requests decided in process; the same files work with `gpusched schedule FILE`.", 100
        )
    )
    return count
