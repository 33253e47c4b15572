"""SGLang diffusion CLI flags <-> ServerArgs field names.

``diffusion_args_from_cli`` reads a model's ``backend_parameters`` into the
``explicit_args`` of a tune request; ``tuned_cli_flags`` renders a
``TuneResult`` back into launch flags for what the user did not set.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Literal

from ._models import TuneResult

ValueKind = Literal["bool", "int", "float", "str", "list"]

#: Flag (without ``--``) -> (ServerArgs field, value kind); aliases as upstream's
#: ``ServerArgs.add_cli_args``.
CLI_FLAGS: Mapping[str, tuple[str, ValueKind]] = MappingProxyType(
    {
        "performance-mode": ("performance_mode", "str"),
        "mode": ("performance_mode", "str"),
        "num-gpus": ("num_gpus", "int"),
        "tp-size": ("tp_size", "int"),
        "sp-degree": ("sp_degree", "int"),
        "ulysses-degree": ("ulysses_degree", "int"),
        "ring-degree": ("ring_degree", "int"),
        "dp-size": ("dp_size", "int"),
        "data-parallel-size": ("dp_size", "int"),
        "enable-cfg-parallel": ("enable_cfg_parallel", "bool"),
        "cfg-parallel-degree": ("cfg_parallel_degree", "int"),
        "cfg-parallel-size": ("cfg_parallel_degree", "int"),
        "use-fsdp-inference": ("use_fsdp_inference", "bool"),
        "dit-cpu-offload": ("dit_cpu_offload", "bool"),
        "dit-layerwise-offload": ("dit_layerwise_offload", "bool"),
        "layerwise-offload-components": ("layerwise_offload_components", "list"),
        "layerwise-offload-modules": ("layerwise_offload_components", "list"),
        "dit-offload-prefetch-size": ("dit_offload_prefetch_size", "float"),
        "text-encoder-cpu-offload": ("text_encoder_cpu_offload", "bool"),
        "image-encoder-cpu-offload": ("image_encoder_cpu_offload", "bool"),
        "vae-cpu-offload": ("vae_cpu_offload", "bool"),
        "enable-torch-compile": ("enable_torch_compile", "bool"),
        "ltx2-two-stage-device-mode": ("ltx2_two_stage_device_mode", "str"),
    }
)

#: Flags whose value must be one of a fixed set, compared as given (argparse ``choices`` in
#: upstream ``ServerArgs.add_cli_args``; ``LTX2_TWO_STAGE_DEVICE_MODE_CHOICES``).
CLI_CHOICES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"ltx2-two-stage-device-mode": ("original", "resident", "snapshot")}
)

#: Boolean spellings accepted on the CLI (compared lower-case).
BOOL_LITERALS: Mapping[str, bool] = MappingProxyType(
    {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
)

#: Result fields rendered by ``tuned_cli_flags``, in output order, with their flag.
TUNED_FLAGS: tuple[tuple[str, str], ...] = (
    ("enable_torch_compile", "--enable-torch-compile"),
    ("use_fsdp_inference", "--use-fsdp-inference"),
    ("dit_cpu_offload", "--dit-cpu-offload"),
    ("dit_layerwise_offload", "--dit-layerwise-offload"),
    ("layerwise_offload_components", "--layerwise-offload-components"),
    ("dit_offload_prefetch_size", "--dit-offload-prefetch-size"),
    ("text_encoder_cpu_offload", "--text-encoder-cpu-offload"),
    ("image_encoder_cpu_offload", "--image-encoder-cpu-offload"),
    ("vae_cpu_offload", "--vae-cpu-offload"),
    ("enable_cfg_parallel", "--enable-cfg-parallel"),
    ("cfg_parallel_degree", "--cfg-parallel-size"),  # ServerArgs.add_cli_args: --cfg-parallel-size
    ("tp_size", "--tp-size"),
    ("sp_degree", "--sp-degree"),
    ("ulysses_degree", "--ulysses-degree"),
    ("ring_degree", "--ring-degree"),
    ("ltx2_two_stage_device_mode", "--ltx2-two-stage-device-mode"),
)


def _split_flag(token: str) -> tuple[str | None, str | None]:
    """``--name=value`` -> (name, value); ``--name`` -> (name, None); else (None, None)."""
    if not token.startswith("--"):
        return None, None
    name, separator, value = token[2:].partition("=")
    return name.replace("_", "-"), (value if separator else None)


def _is_flag(token: str) -> bool:
    return token.startswith("--")


def _take_values(
    tokens: Sequence[str], index: int, kind: ValueKind, inline: str | None
) -> tuple[list[str] | None, int]:
    """The value tokens of one flag and the index after them (None = bare boolean)."""
    if inline is not None:
        return [inline], index
    has_next = index < len(tokens) and not _is_flag(tokens[index])
    if kind == "bool":
        if has_next and tokens[index].lower() in BOOL_LITERALS:
            return [tokens[index]], index + 1
        return None, index
    if kind == "list":
        end = index
        while end < len(tokens) and not _is_flag(tokens[end]):
            end += 1
        return list(tokens[index:end]), end
    return ([tokens[index]], index + 1) if has_next else ([], index)


def _parse_bool(flag: str, values: list[str] | None) -> bool:
    if values is None:
        return True
    literal = values[0].strip().lower()
    if literal not in BOOL_LITERALS:
        raise ValueError(f"--{flag}: expected true/false/1/0/yes/no, got {values[0]!r}")
    return BOOL_LITERALS[literal]


def _parse_number(flag: str, kind: ValueKind, text: str) -> int | float:
    try:
        number: int | float = int(text) if kind == "int" else float(text)
    except ValueError:
        expected = "an integer" if kind == "int" else "a number"
        raise ValueError(f"--{flag}: expected {expected}, got {text!r}") from None
    if isinstance(number, float) and not math.isfinite(number):
        raise ValueError(f"--{flag}: expected a finite number, got {text!r}")
    return number


def _parse_list(flag: str, values: list[str]) -> list[str]:
    items = [part.strip() for value in values for part in value.split(",")]
    components = [item for item in items if item]
    if not components:
        raise ValueError(f"--{flag}: expected a comma-separated list of components")
    return components


def _parse_choice(flag: str, text: str) -> str:
    choices = CLI_CHOICES.get(flag)
    if choices is not None and text not in choices:
        listed = ", ".join(repr(choice) for choice in choices)
        raise ValueError(f"--{flag}: invalid choice {text!r} (choose from {listed})")
    return text


def _convert(flag: str, kind: ValueKind, values: list[str] | None) -> Any:
    if kind == "bool":
        return _parse_bool(flag, values)
    if not values:
        raise ValueError(f"--{flag}: expects a value")
    if kind == "list":
        return _parse_list(flag, values)
    if kind == "str":
        return _parse_choice(flag, values[0])
    return _parse_number(flag, kind, values[0])


def diffusion_args_from_cli(backend_parameters: Sequence[str]) -> dict[str, Any]:
    """Parse SGLang diffusion CLI flags into ServerArgs field names and typed values.

    Accepts ``--k=v``, ``--k v`` and bare ``--k`` (True, booleans only; a bare
    boolean followed by a non-boolean token leaves that token alone). Booleans
    take true/false/1/0/yes/no in any case; ``--layerwise-offload-components``
    takes commas and/or several tokens. Underscores in flag names count as
    dashes; when a flag repeats the last one wins (argparse). A flag with
    fixed choices (``CLI_CHOICES``) takes only those, case-sensitive, as
    SGLang's argparse does. Unknown flags and stray tokens are ignored. Pure.

    Raises:
        ValueError: naming the flag when its value does not parse.
    """
    tokens = list(backend_parameters)
    parsed: dict[str, Any] = {}
    index = 0
    while index < len(tokens):
        flag, inline = _split_flag(tokens[index])
        index += 1
        spec = CLI_FLAGS.get(flag) if flag is not None else None
        if flag is None or spec is None:
            continue
        field_name, kind = spec
        values, index = _take_values(tokens, index, kind, inline)
        parsed[field_name] = _convert(flag, kind, values)
    return parsed


def _render(value: bool | int | float | str | list[str]) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def tuned_cli_flags(result: TuneResult, explicit: Collection[str]) -> list[str]:
    """Launch flags pinning the tuned values the user did not set.

    Output is ``[flag, value, flag, value, ...]`` in ``TUNED_FLAGS`` order.
    Booleans are always a ``--name true|false`` pair (SGLang's diffusion
    booleans take an optional value), lists are comma-joined, whole floats
    print as integers. Fields named in ``explicit`` are skipped (the user's
    own flags already carry them), and so are None values (SGLang has no
    spelling for "unset"). ``performance_mode`` and ``num_gpus`` are inputs,
    not tuned values, and are never emitted. Pure and deterministic.
    """
    flags: list[str] = []
    for field_name, flag in TUNED_FLAGS:
        value = getattr(result, field_name)
        if field_name in explicit or value is None:
            continue
        flags.extend((flag, _render(value)))
    return flags
