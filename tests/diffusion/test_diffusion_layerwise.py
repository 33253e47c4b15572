"""Layerwise list normalisation and the group -> flag mapping.

Upstream: ``ServerArgs._adjust_layerwise_offload_components`` and ``layerwise_offload_components.py``.
"""

from __future__ import annotations

import pytest

from scheduler_core.diffusion._layerwise import (
    normalize_components,
    offload_flags_for,
    selects_dit,
    with_dit_prepended,
)

ALL_FLAGS = (
    "dit_cpu_offload",
    "text_encoder_cpu_offload",
    "image_encoder_cpu_offload",
    "vae_cpu_offload",
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ("text_encoder,vae", ["text_encoder", "vae"]),
        (["text_encoder, vae", "dit"], ["text_encoder", "vae", "dit"]),
        ("Text-Encoder,VIDEO-VAE", ["text_encoder", "video_vae"]),
        ("default", ["text_encoder", "image_encoder", "vae"]),
        ("vae,default", ["vae", "text_encoder", "image_encoder"]),
        ("vae,all,dit", ["all"]),
        ("vae,vae,text_encoder,VAE", ["vae", "text_encoder"]),
        ("", None),
        (",, ,", None),
        ([], None),
    ],
)
def test_normalize_components(raw, expected):
    """Rule: split commas, '-'->'_', lower-case, expand default, 'all' wins, dedupe in order.

    A list naming nothing normalises to None (``normalize_layerwise_offload_components``).
    """
    assert normalize_components(raw) == expected


def test_normalize_components_is_idempotent():
    """Rule: normalising a normalised list changes nothing."""
    once = normalize_components("Default,DIT,text-encoder-2")
    assert normalize_components(once) == once


@pytest.mark.parametrize(
    ("components", "expected"),
    [
        (None, ["dit"]),
        (["vae"], ["dit", "vae"]),
        (["vae", "dit"], ["vae", "dit"]),
        (["all"], ["dit", "all"]),
        (["transformer"], ["dit", "transformer"]),
    ],
)
def test_with_dit_prepended(components, expected):
    """Rule: prepend 'dit' unless the literal 'dit' group is listed (None -> ['dit']).

    Upstream checks ``"dit" not in`` the list only, so 'all' and DiT aliases get it too.
    """
    assert with_dit_prepended(components) == expected


@pytest.mark.parametrize(
    ("component", "flags"),
    [
        *[
            (name, ("dit_cpu_offload",))
            for name in (
                "dit",
                "transformer",
                "transformer_2",
                "video_dit",
                "video_dit_2",
                "audio_dit",
                "dual_tower_bridge",
            )
        ],
        ("text_encoder", ("text_encoder_cpu_offload",)),
        ("text_encoder_2", ("text_encoder_cpu_offload",)),
        ("llm_text_encoder", ("text_encoder_cpu_offload",)),
        ("image_encoder", ("image_encoder_cpu_offload",)),
        *[
            (name, ("vae_cpu_offload",))
            for name in (
                "vae",
                "video_vae",
                "audio_vae",
                "vocoder",
                "spatial_upsampler",
                "condition_image_encoder",
            )
        ],
        ("all", ALL_FLAGS),
        ("scheduler", ()),
    ],
)
def test_offload_flag_mapping(component, flags):
    """Rule: the group -> *_cpu_offload flag mapping of _adjust_layerwise_offload_components."""
    assert offload_flags_for(component) == flags


@pytest.mark.parametrize(
    ("components", "expected"),
    [(None, False), (["vae"], False), ("Transformer-2", True), (["all"], True), (["dit"], True)],
)
def test_selects_dit(components, expected):
    """Rule: the DiT counts as selected for any DiT-group name or 'all'."""
    assert selects_dit(components) is expected


def test_normalisation_prepends_dit_for_legacy_flag(run):
    """Rule: dit_layerwise_offload=True prepends 'dit'; dit_cpu_offload is kept."""
    result = run(explicit={"dit_layerwise_offload": True, "layerwise_offload_components": "vae"})
    assert result.layerwise_offload_components == ["dit", "vae"]
    assert result.dit_cpu_offload is True
    assert result.dit_layerwise_offload is True


def test_normalisation_all_disables_aux_flags_and_keeps_dit_flag(run):
    """Rule: selected groups' text/image/vae flags go False; dit_cpu_offload is kept."""
    result = run(
        explicit={
            "layerwise_offload_components": "ALL",
            "dit_cpu_offload": True,
            "text_encoder_cpu_offload": True,
            "image_encoder_cpu_offload": True,
            "vae_cpu_offload": True,
        }
    )
    assert result.layerwise_offload_components == ["all"]
    assert result.dit_cpu_offload is True
    assert result.text_encoder_cpu_offload is False
    assert result.image_encoder_cpu_offload is False
    assert result.vae_cpu_offload is False
    assert (
        "Layerwise offload of ['all'] replaces CPU offload: text_encoder_cpu_offload=False, "
        "image_encoder_cpu_offload=False, vae_cpu_offload=False" in result.logs
    )


def test_normalisation_secondary_text_encoder_disables_text_flag(run):
    """Rule: names starting or ending with text_encoder map to text_encoder_cpu_offload."""
    result = run(
        explicit={
            "layerwise_offload_components": ["text-encoder-2"],
            "text_encoder_cpu_offload": True,
        }
    )
    assert result.layerwise_offload_components == ["text_encoder_2"]
    assert result.text_encoder_cpu_offload is False


def test_normalisation_default_selector_and_dedupe(run):
    """Rule: 'default' expands to the three aux groups; duplicates are dropped in order."""
    result = run(explicit={"layerwise_offload_components": "vae,default,VAE"})
    assert result.layerwise_offload_components == ["vae", "text_encoder", "image_encoder"]
    assert (
        "Normalized layerwise_offload_components: ['vae,default,VAE'] -> "
        "['vae', 'text_encoder', 'image_encoder']" in result.logs
    )


@pytest.mark.parametrize("raw", [[], "", [" , "]])
def test_normalisation_naming_nothing_keeps_the_given_value(run, raw):
    """Rule: upstream assigns the normalised list only when it names something.

    An explicit ``[]`` (or ``""``, read as ``[]``) stays ``[]``; a list of blanks
    stays as given; no CPU-offload flag is switched off.
    """
    result = run(explicit={"layerwise_offload_components": raw})
    assert result.layerwise_offload_components == ([] if raw == "" else raw)
    assert result.text_encoder_cpu_offload is True  # the image-task pre-default stands
    assert not [line for line in result.logs if line.startswith("Normalized layerwise")]


def test_normalisation_legacy_flag_with_empty_list_gives_dit(run):
    """Rule: dit_layerwise_offload=True with a list naming nothing -> ['dit']."""
    result = run(explicit={"dit_layerwise_offload": True, "layerwise_offload_components": []})
    assert result.layerwise_offload_components == ["dit"]


def test_normalisation_legacy_flag_prepends_dit_to_all(run):
    """Rule: dit_layerwise_offload=True with ['all'] -> ['dit', 'all'] ('all' is not the 'dit' group)."""
    result = run(explicit={"dit_layerwise_offload": True, "layerwise_offload_components": ["all"]})
    assert result.layerwise_offload_components == ["dit", "all"]
    assert "Normalized layerwise_offload_components: ['all'] -> ['dit', 'all']" in result.logs
    assert result.dit_cpu_offload is True
    assert result.text_encoder_cpu_offload is False
    assert result.image_encoder_cpu_offload is False
    assert result.vae_cpu_offload is False
