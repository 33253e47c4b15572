"""LTX-2.3 two-stage device mode and its resident pass.

Upstream: ``ServerArgs._adjust_ltx2_two_stage_device_mode`` and the LTX-2.3 part of
``ServerArgsAutoTuner.maybe_adjust_auto_component_residency_after_offload``.
"""

from __future__ import annotations

import pytest

LTX23 = "LTX23PipelineConfig"
TWO_STAGE = {"is_ltx23_two_stage_pipeline": True}


def _mode_log(result):
    return [line for line in result.logs if line.startswith("LTX-2.3 two-stage device mode")]


def test_ltx2_mode_default_resident_for_h200_name(run):
    """Rule: on CUDA a device name containing 'H200' selects resident (even below 130 GiB)."""
    result = run(LTX23, pipeline=TWO_STAGE, device_name="NVIDIA H200", total=120)
    assert result.ltx2_two_stage_device_mode == "resident"
    assert _mode_log(result) == [
        "LTX-2.3 two-stage device mode: ltx2_two_stage_device_mode=resident "
        "(default: device name 'NVIDIA H200' contains 'H200')"
    ]


@pytest.mark.parametrize("device_name", ["nvidia h200", "NVIDIA H200 NVL", "h200"])
def test_ltx2_mode_h200_name_match_ignores_case(run, device_name):
    """Rule: upstream upper-cases get_device_name(0) before looking for 'H200'."""
    result = run(LTX23, pipeline=TWO_STAGE, device_name=device_name, total=120)
    assert result.ltx2_two_stage_device_mode == "resident"
    assert _mode_log(result) == [
        "LTX-2.3 two-stage device mode: ltx2_two_stage_device_mode=resident "
        f"(default: device name {device_name!r} contains 'H200')"
    ]


@pytest.mark.parametrize(("total", "mode"), [(130.0, "resident"), (129.9, "original")])
def test_ltx2_mode_default_by_130gib_total(run, total, mode):
    """Rule: on CUDA total memory >= 130 GiB (LTX2_RESIDENT_AUTO_ENABLE_MEM_GB) -> resident."""
    result = run(LTX23, pipeline=TWO_STAGE, device_name="NVIDIA B200", total=total)
    assert result.ltx2_two_stage_device_mode == mode


def test_ltx2_mode_default_original_for_h100(run):
    """Rule: CUDA, not an H200 and < 130 GiB -> original."""
    result = run(LTX23, pipeline=TWO_STAGE, device_name="NVIDIA H100 80GB HBM3")
    assert result.ltx2_two_stage_device_mode == "original"


@pytest.mark.parametrize("kind", ["rocm", "npu", "mps", "cpu"])
def test_ltx2_mode_default_original_off_cuda(run, kind):
    """Rule: non-CUDA platforms default to original, whatever the memory."""
    result = run(LTX23, pipeline=TWO_STAGE, kind=kind, total=192, device_name="H200")
    assert result.ltx2_two_stage_device_mode == "original"


@pytest.mark.parametrize(
    ("env", "device_name", "expected"),
    [("original", "NVIDIA H200", "original"), ("RESIDENT", "NVIDIA H100", "resident")],
)
def test_ltx2_mode_env_beats_default(run, env, device_name, expected):
    """Rule: SGLANG_LTX2_TWO_STAGE_DEVICE_MODE wins over the default."""
    result = run(LTX23, pipeline=TWO_STAGE, ltx2_env=env, device_name=device_name)
    assert result.ltx2_two_stage_device_mode == expected


@pytest.mark.parametrize(
    ("device_name", "expected"), [("NVIDIA H200", "resident"), ("NVIDIA H100", "original")]
)
def test_ltx2_mode_empty_env_counts_as_unset(run, device_name, expected):
    """Rule: upstream uses the env only when non-empty (``if env_mode``): "" -> the default."""
    result = run(LTX23, pipeline=TWO_STAGE, ltx2_env="", device_name=device_name)
    assert result.ltx2_two_stage_device_mode == expected
    assert "(default: " in _mode_log(result)[0]


def test_ltx2_mode_explicit_beats_env(run):
    """Rule: the explicit arg wins over the env."""
    result = run(
        LTX23,
        pipeline=TWO_STAGE,
        explicit={"ltx2_two_stage_device_mode": "original"},
        ltx2_env="resident",
        device_name="NVIDIA H200",
    )
    assert result.ltx2_two_stage_device_mode == "original"


@pytest.mark.parametrize(
    ("explicit", "env"),
    [({"ltx2_two_stage_device_mode": "snapshot"}, None), ({}, "SNAPSHOT")],
)
def test_ltx2_snapshot_maps_to_original(run, explicit, env):
    """Rule: snapshot is a deprecated alias of original."""
    result = run(LTX23, pipeline=TWO_STAGE, explicit=explicit, ltx2_env=env)
    assert result.ltx2_two_stage_device_mode == "original"
    assert "deprecated alias of 'original'" in _mode_log(result)[0]


def test_ltx2_mode_untouched_for_other_pipelines(run):
    """Rule: only LTX-2.3 two-stage pipelines get a mode; others keep the given value."""
    plain = run(LTX23, device_name="NVIDIA H200")
    given = run("LTX2PipelineConfig", explicit={"ltx2_two_stage_device_mode": "resident"})
    assert plain.ltx2_two_stage_device_mode is None
    assert given.ltx2_two_stage_device_mode == "resident"
    assert _mode_log(plain) == [] and _mode_log(given) == []


@pytest.mark.parametrize("value", ["SNAPSHOT", "Resident", "foo"])
def test_ltx2_mode_not_read_for_other_pipelines(run, value):
    """Rule: off LTX-2.3 two-stage, upstream neither lower-cases, maps nor validates the mode."""
    result = run(explicit={"ltx2_two_stage_device_mode": value}, ltx2_env="bogus")
    assert result.ltx2_two_stage_device_mode == value
    assert _mode_log(result) == []


@pytest.mark.parametrize(
    ("explicit", "env", "shown"),
    [
        ({"ltx2_two_stage_device_mode": "foo"}, None, "foo"),
        ({"ltx2_two_stage_device_mode": "FAST"}, "resident", "fast"),
        ({"ltx2_two_stage_device_mode": ""}, None, ""),
        ({}, "foo", "foo"),
        ({}, " ", " "),
    ],
)
def test_ltx2_invalid_mode_raises_upstream_text(run, explicit, env, shown):
    """Rule: an explicit or env value that is not a mode -> upstream's ValueError.

    The value is lower-cased first, so the text shows it lower-cased; the
    listed choices include the ``snapshot`` alias.
    """
    expected = (
        f"Invalid ltx2_two_stage_device_mode={shown!r}. "
        "Expected one of ('original', 'resident', 'snapshot')."
    )
    with pytest.raises(ValueError) as raised:
        run(LTX23, pipeline=TWO_STAGE, explicit=explicit, ltx2_env=env)
    assert str(raised.value) == expected


def test_ltx2_explicit_mode_is_lower_cased(run):
    """Rule: on LTX-2.3 two-stage the explicit value is lower-cased before use."""
    result = run(LTX23, pipeline=TWO_STAGE, explicit={"ltx2_two_stage_device_mode": "RESIDENT"})
    assert result.ltx2_two_stage_device_mode == "resident"


def test_ltx2_mode_chosen_in_manual_mode_too(run):
    """Rule: _adjust_ltx2_two_stage_device_mode is not gated by the performance mode."""
    result = run(
        LTX23,
        pipeline=TWO_STAGE,
        explicit={"performance_mode": "manual"},
        device_name="NVIDIA H200",
    )
    assert result.ltx2_two_stage_device_mode == "resident"


def test_ltx23_resident_mode_keeps_aux_components_resident(run):
    """Rule: auto, resident mode on CUDA with >= 130 GiB total -> aux components stay on GPU."""
    result = run(LTX23, pipeline=TWO_STAGE, total=180, free=170, device_name="NVIDIA B200")
    assert result.ltx2_two_stage_device_mode == "resident"
    assert (
        "Disabling component offload for LTX23PipelineConfig because minimum available memory "
        "on selected GPUs is 170.00 GiB: dit_cpu_offload=False" in result.logs
    )
    assert (
        "Keeping LTX2 high-memory two-stage auxiliary components resident: "
        "layerwise_offload_components=None, text_encoder_cpu_offload=False, "
        "image_encoder_cpu_offload=False" in result.logs
    )
    assert result.layerwise_offload_components is None
    assert result.dit_cpu_offload is False
    assert result.text_encoder_cpu_offload is False
    assert result.image_encoder_cpu_offload is False


def test_ltx23_resident_aux_pass_needs_130gib_total(run):
    """Rule: the H200 name alone selects resident, but the aux pass needs total >= 130 GiB."""
    result = run(LTX23, pipeline=TWO_STAGE, total=120, free=110, device_name="NVIDIA H200")
    assert result.ltx2_two_stage_device_mode == "resident"
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder", "vae"]
    assert result.dit_cpu_offload is False  # the model's own 70 GiB residency still applies


def test_ltx23_resident_aux_pass_keeps_explicit_flags(run):
    """Rule: the aux pass flips only non-explicit *_cpu_offload flags."""
    result = run(
        LTX23,
        pipeline=TWO_STAGE,
        total=180,
        explicit={"text_encoder_cpu_offload": True},
    )
    assert result.text_encoder_cpu_offload is True
    assert result.image_encoder_cpu_offload is False
    assert result.layerwise_offload_components is None


def test_ltx23_original_mode_keeps_default_layerwise(run):
    """Rule: original mode -> no aux pass; default layerwise list stays."""
    result = run(LTX23, pipeline=TWO_STAGE, device_name="NVIDIA H100 80GB HBM3")
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder", "vae"]
    assert result.dit_cpu_offload is False  # 80 GiB free >= LTX's 70 GiB keeps the DiT


def test_ltx23_aux_pass_skipped_with_explicit_memory_policy(run):
    """Rule: the aux pass lives inside the auto residency step, skipped on explicit policy."""
    result = run(
        LTX23,
        pipeline=TWO_STAGE,
        total=180,
        explicit={"use_fsdp_inference": False},
    )
    assert result.ltx2_two_stage_device_mode == "resident"
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder", "vae"]
    assert result.dit_cpu_offload is True
