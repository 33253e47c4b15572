"""Layerwise-offload group names, list normalisation and the group -> CPU-offload-flag map.

Upstream: ``server_args.py: ServerArgs._adjust_layerwise_offload_components`` and
``layerwise_offload_components.py`` (group names, ``normalize_layerwise_offload_components``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

#: Group names the tuner selects (upstream ``LAYERWISE_OFFLOAD_*_GROUP``).
DIT_GROUP = "dit"
TEXT_ENCODER_GROUP = "text_encoder"
IMAGE_ENCODER_GROUP = "image_encoder"
VAE_GROUP = "vae"

#: ``default`` expands to the three auxiliary groups, in this order (``LAYERWISE_OFFLOAD_DEFAULT_GROUP``).
DEFAULT_SELECTOR = "default"
DEFAULT_SELECTOR_GROUPS = (TEXT_ENCODER_GROUP, IMAGE_ENCODER_GROUP, VAE_GROUP)

#: ``all`` selects every offloadable component and short-circuits the list
#: (``LAYERWISE_OFFLOAD_ALL_COMPONENTS``).
ALL_SELECTOR = "all"

#: The CPU-offload flags, one per group (ServerArgs field names).
DIT_FLAG = "dit_cpu_offload"
TEXT_ENCODER_FLAG = "text_encoder_cpu_offload"
IMAGE_ENCODER_FLAG = "image_encoder_cpu_offload"
VAE_FLAG = "vae_cpu_offload"
ALL_FLAGS = (DIT_FLAG, TEXT_ENCODER_FLAG, IMAGE_ENCODER_FLAG, VAE_FLAG)

#: Component names that map to ``dit_cpu_offload`` (upstream ``DIT_COMPONENT_NAMES`` plus the group).
DIT_COMPONENTS = frozenset(
    {
        DIT_GROUP,
        "transformer",
        "transformer_2",
        "video_dit",
        "video_dit_2",
        "audio_dit",
        "dual_tower_bridge",
    }
)

#: Component names that map to ``vae_cpu_offload`` (upstream ``VAE_COMPONENT_NAMES``).
VAE_COMPONENTS = frozenset(
    {
        VAE_GROUP,
        "video_vae",
        "audio_vae",
        "vocoder",
        "spatial_upsampler",
        "condition_image_encoder",
    }
)

#: The auxiliary (group, flag) pairs, in upstream's default-selection order
#: (``auto_tune.py: DEFAULT_LAYERWISE_COMPONENT_ARG_NAMES``).
AUX_GROUP_FLAGS = (
    (TEXT_ENCODER_GROUP, TEXT_ENCODER_FLAG),
    (IMAGE_ENCODER_GROUP, IMAGE_ENCODER_FLAG),
    (VAE_GROUP, VAE_FLAG),
)


def _split_names(raw: Sequence[str] | str) -> list[str]:
    items = [raw] if isinstance(raw, str) else list(raw)
    names: list[str] = []
    for item in items:
        for part in item.split(","):
            name = part.strip().replace("-", "_").lower()
            if name:
                names.append(name)
    return names


def _expand_default(names: Iterable[str]) -> list[str]:
    expanded: list[str] = []
    for name in names:
        expanded.extend(DEFAULT_SELECTOR_GROUPS if name == DEFAULT_SELECTOR else (name,))
    return expanded


def normalize_components(raw: Sequence[str] | str | None) -> list[str] | None:
    """Normalise a user/tuner layerwise list (pure, idempotent).

    Splits on commas, maps ``-`` to ``_``, lower-cases, expands ``default``,
    collapses to ``["all"]`` when ``all`` appears, and drops duplicates
    keeping the first occurrence.

    Returns:
        The normalised list, or None when ``raw`` is None or names nothing
        (``[]``, ``""``, ``",,"``), as ``normalize_layerwise_offload_components``.
    """
    if raw is None:
        return None
    names = _expand_default(_split_names(raw))
    if ALL_SELECTOR in names:
        return [ALL_SELECTOR]
    return list(dict.fromkeys(names)) or None


def with_dit_prepended(components: list[str] | None) -> list[str]:
    """Put the ``dit`` group first, as the legacy ``dit_layerwise_offload`` flag asks.

    Only the literal ``dit`` group counts as already there, so ``["all"]``
    becomes ``["dit", "all"]`` and ``["transformer"]`` ``["dit", "transformer"]``
    (``ServerArgs._adjust_layerwise_offload_components``); None becomes ``["dit"]``.
    """
    current = components or []
    if DIT_GROUP in current:
        return list(current)
    return [DIT_GROUP, *current]


def offload_flags_for(component: str) -> tuple[str, ...]:
    """The ``*_cpu_offload`` flags a normalised component name belongs to.

    Unknown names map to no flag.
    """
    if component == ALL_SELECTOR:
        return ALL_FLAGS
    if component in DIT_COMPONENTS:
        return (DIT_FLAG,)
    if component.startswith(TEXT_ENCODER_GROUP) or component.endswith(TEXT_ENCODER_GROUP):
        return (TEXT_ENCODER_FLAG,)
    if component == IMAGE_ENCODER_GROUP:
        return (IMAGE_ENCODER_FLAG,)
    if component in VAE_COMPONENTS:
        return (VAE_FLAG,)
    return ()


def selects_dit(components: Sequence[str] | str | None) -> bool:
    """Whether a layerwise list (raw or normalised) selects the DiT group."""
    normalized = normalize_components(components) or []
    return any(DIT_FLAG in offload_flags_for(name) for name in normalized)
