"""Offload pre-defaults, auto layerwise, residency, replacement.

Upstream: ``ServerArgs._adjust_offload`` and ``ServerArgsAutoTuner``'s
``maybe_adjust_auto_default_layerwise_offload``,
``maybe_adjust_auto_component_residency_after_offload`` and
``maybe_replace_cpu_offloaded_components_with_layerwise``.
"""

from __future__ import annotations

import pytest

# --- _adjust_offload (ROCm: no later CUDA-only step rewrites its output) ---------------------


def test_adjust_offload_total_below_30gib_offloads_dit_text_image(run):
    """Rule: total < 30 GiB -> dit, text_encoder and image_encoder CPU offload, any task."""
    result = run(kind="rocm", total=24)
    assert (
        "Offload pre-defaults (device total memory 24.00 GiB < 30 GiB): dit_cpu_offload=True, "
        "text_encoder_cpu_offload=True, image_encoder_cpu_offload=True" in result.logs
    )
    assert result.dit_cpu_offload is True
    assert result.text_encoder_cpu_offload is True
    assert result.image_encoder_cpu_offload is True
    assert result.vae_cpu_offload is False


def test_adjust_offload_image_task_keeps_image_encoder_resident(run):
    """Rule: image task at >= 30 GiB -> dit and text_encoder offload, image_encoder not."""
    result = run(kind="rocm", total=30)
    assert result.dit_cpu_offload is True
    assert result.text_encoder_cpu_offload is True
    assert result.image_encoder_cpu_offload is False


def test_adjust_offload_video_task_offloads_dit_text_image(run):
    """Rule: video task at >= 30 GiB -> dit, text_encoder and image_encoder offload."""
    result = run("WanT2V480PConfig", kind="rocm", total=80)
    assert "Offload pre-defaults (non-image task T2V)" in result.logs[3]
    assert result.dit_cpu_offload is True
    assert result.text_encoder_cpu_offload is True
    assert result.image_encoder_cpu_offload is True
    assert result.vae_cpu_offload is False


def test_adjust_offload_only_fills_unset_flags(run):
    """Rule: _adjust_offload sets flags that are still None only."""
    result = run(kind="rocm", explicit={"text_encoder_cpu_offload": False})
    assert result.text_encoder_cpu_offload is False
    assert result.dit_cpu_offload is True


def test_adjust_offload_action_task_defaults_unset_flags_off(run):
    """Rule: VLA_ACTION (Pi0.5) -> every still-unset *_cpu_offload flag defaults to False."""
    result = run("Pi05PipelineConfig")
    assert (
        "Offload pre-defaults (action task VLA_ACTION): dit_cpu_offload=False, "
        "text_encoder_cpu_offload=False, image_encoder_cpu_offload=False" in result.logs
    )
    assert result.dit_cpu_offload is False
    assert result.text_encoder_cpu_offload is False
    assert result.image_encoder_cpu_offload is False
    assert result.vae_cpu_offload is False


def test_adjust_offload_action_task_keeps_explicit_offload(run):
    """Rule: the action branch fills None flags only (``if self.dit_cpu_offload is None``, ...).

    Explicit dit/vae True survive; text/image encoder, unset, default to False.
    """
    result = run("Pi05PipelineConfig", explicit={"dit_cpu_offload": True, "vae_cpu_offload": True})
    assert (
        "Offload pre-defaults (action task VLA_ACTION): text_encoder_cpu_offload=False, "
        "image_encoder_cpu_offload=False" in result.logs
    )
    assert result.dit_cpu_offload is True
    assert result.text_encoder_cpu_offload is False
    assert result.image_encoder_cpu_offload is False
    assert result.vae_cpu_offload is True
    assert result.layerwise_offload_components is None


def test_action_task_gets_no_default_layerwise(run):
    """Rule: default layerwise components are empty for action models, even in memory mode."""
    result = run("Pi05PipelineConfig", explicit={"performance_mode": "memory"})
    assert result.layerwise_offload_components is None
    # memory mode sets dit_cpu_offload=True before _adjust_offload, whose action branch
    # only fills flags still None, so upstream keeps it
    assert result.dit_cpu_offload is True
    assert result.text_encoder_cpu_offload is False
    assert result.image_encoder_cpu_offload is False


# --- auto residency threshold (45 image / 120 other / per model) ----------------------------


def test_auto_image_model_keeps_vae_resident_from_45gib(run):
    """Rule: image task threshold 45 GiB; the default keep_resident group is the VAE."""
    result = run(free=45)
    assert (
        "Keeping default layerwise components resident for QwenImagePipelineConfig because "
        "minimum available memory on selected GPUs is 45.00 GiB: vae" in result.logs
    )
    assert (
        "Auto memory policy for QwenImagePipelineConfig selected layerwise offload components: "
        "text_encoder, image_encoder" in result.logs
    )
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder"]


def test_auto_image_model_below_45gib_offloads_vae_layerwise(run):
    """Rule: below the 45 GiB image threshold the VAE joins the default layerwise list."""
    result = run(free=44.99)
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder", "vae"]
    assert result.vae_cpu_offload is False


@pytest.mark.parametrize(
    ("free", "expected"),
    [
        (119.9, ["text_encoder", "image_encoder", "vae"]),
        (120.0, ["text_encoder", "image_encoder"]),
    ],
)
def test_auto_video_model_threshold_is_120gib(run, free, expected):
    """Rule: non-image tasks without a pin use the 120 GiB threshold."""
    result = run("Wan2_2_TI2V_5B_Config", free=free, total=141)
    assert result.layerwise_offload_components == expected


@pytest.mark.parametrize(("free", "dit_offload"), [(70.0, False), (69.0, True)])
def test_auto_per_model_threshold_overrides_task_default(run, free, dit_offload):
    """Rule: keep_resident_min_available_gb (LTX-2: 70, keeps the DiT) beats 45/120."""
    result = run("LTX2PipelineConfig", free=free)
    assert result.dit_cpu_offload is dit_offload
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder", "vae"]
    if not dit_offload:
        assert (
            "Disabling component offload for LTX2PipelineConfig because minimum available "
            "memory on selected GPUs is 70.00 GiB: dit_cpu_offload=False" in result.logs
        )


def test_auto_threshold_uses_min_free_over_selected_gpus(run):
    """Rule: the least-free selected GPU decides (devices base_gpu_id..+num_gpus-1)."""
    result = run(explicit={"num_gpus": 2, "base_gpu_id": 1}, free={0: 10, 1: 80, 2: 44})
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder", "vae"]


def test_dmd_wan_keeps_aux_components_resident_from_60gib(run):
    """Rule: TurboWan 1.3B pins 60 GiB and keeps text/image encoders and VAE resident."""
    result = run("TurboWanT2V1_3B480PConfig", free=60)
    assert (
        "Keeping default layerwise components resident for TurboWanT2V1_3B480PConfig because "
        "minimum available memory on selected GPUs is 60.00 GiB: text_encoder, image_encoder, vae"
        in result.logs
    )
    assert (
        "Disabling component offload for TurboWanT2V1_3B480PConfig because minimum available "
        "memory on selected GPUs is 60.00 GiB: text_encoder_cpu_offload=False, "
        "image_encoder_cpu_offload=False" in result.logs
    )
    assert result.layerwise_offload_components is None
    assert result.dit_cpu_offload is True
    assert result.text_encoder_cpu_offload is False
    assert result.image_encoder_cpu_offload is False


def test_dmd_wan_below_60gib_offloads_aux_layerwise(run):
    """Rule: below its pin the DMD Wan aux components go layerwise (no DiT: DMD)."""
    result = run("FastWan2_1_T2V_480P_Config", free=59)
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder", "vae"]
    assert result.dit_cpu_offload is True


def test_residency_skipped_with_explicit_memory_policy(run):
    """Rule: any explicit memory-policy arg (even equal to a default) skips residency."""
    result = run("LTX2PipelineConfig", free=80, explicit={"use_fsdp_inference": False})
    assert result.dit_cpu_offload is True
    assert not any(line.startswith("Disabling component offload") for line in result.logs)


def test_residency_keeps_explicit_component_flags(run):
    """Rule: residency never flips an explicit *_cpu_offload flag."""
    result = run("TurboWanT2V1_3B480PConfig", free=60, explicit={"text_encoder_cpu_offload": True})
    assert result.text_encoder_cpu_offload is True
    assert result.image_encoder_cpu_offload is False
    assert result.layerwise_offload_components is None


def test_residency_drops_resident_groups_from_default_layerwise_list(run):
    """Rule: residency removes keep_resident groups from a non-explicit layerwise list."""
    result = run(
        "Wan2_2_T2V_A14B_Config",
        free=100,
        deployment={
            "auto_dit_layerwise_offload": True,
            "keep_resident_min_available_gb": 100,
            "keep_resident_components": ["dit"],
        },
    )
    assert (
        "Disabling component offload for Wan2_2_T2V_A14B_Config because minimum available memory "
        "on selected GPUs is 100.00 GiB: layerwise_offload_components=['text_encoder', "
        "'image_encoder', 'vae'], dit_cpu_offload=False" in result.logs
    )
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder", "vae"]
    assert result.dit_cpu_offload is False


# --- auto default layerwise -----------------------------------------------------------------


def test_auto_default_layerwise_excludes_explicit_flags_equal_to_default(run):
    """Rule: an explicit *_cpu_offload (True *or* False, even the default) stays out."""
    result = run(free=30, explicit={"vae_cpu_offload": False})
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder"]
    assert "vae_cpu_offload" in result.explicit_args


def test_auto_default_layerwise_skipped_for_legacy_dit_layerwise_flag(run):
    """Rule: dit_layerwise_offload=True is a DiT-only selector; no defaults merge into it."""
    result = run(explicit={"dit_layerwise_offload": True})
    assert result.layerwise_offload_components == ["dit"]
    assert result.dit_cpu_offload is True
    assert result.text_encoder_cpu_offload is True  # replacement is blocked by the explicit flag


def test_auto_default_layerwise_skipped_for_explicit_components(run):
    """Rule: an explicit layerwise list is kept as given (normalised)."""
    result = run(explicit={"layerwise_offload_components": ["vae"]})
    assert result.layerwise_offload_components == ["vae"]
    assert result.text_encoder_cpu_offload is True


def test_auto_default_layerwise_explicit_null_components_counts_as_explicit(run):
    """Rule: explicit means present, so ``layerwise_offload_components: null`` blocks defaults."""
    result = run(explicit={"layerwise_offload_components": None})
    assert result.layerwise_offload_components is None
    assert result.text_encoder_cpu_offload is True


# --- Wan DiT layerwise ----------------------------------------------------------------------


def test_wan2_2_a14b_auto_enables_dit_layerwise_and_prefetch_2(run):
    """Rule: auto mode, Wan2.2 A14B on CUDA -> ``dit`` first and dit_offload_prefetch_size=2."""
    result = run("Wan2_2_T2V_A14B_Config")
    assert result.layerwise_offload_components == ["dit", "text_encoder", "image_encoder", "vae"]
    assert result.dit_offload_prefetch_size == 2.0
    assert result.dit_cpu_offload is True  # kept: load-time host residency
    assert result.dit_layerwise_offload is False
    assert (
        "Setting dit_offload_prefetch_size=2 for Wan2.2 A14B DiT layerwise offload in auto mode "
        "(Wan2_2_T2V_A14B_Config)" in result.logs
    )


def test_wan2_2_a14b_auto_high_memory_keeps_vae_resident(run):
    """Rule: at >= 120 GiB free the VAE stays resident; the DiT still goes layerwise."""
    result = run("Wan2_2_I2V_A14B_Config", total=141, free=140)
    assert result.layerwise_offload_components == ["dit", "text_encoder", "image_encoder"]


def test_wan2_2_a14b_explicit_prefetch_equal_to_default_survives(run):
    """Rule: an explicit dit_offload_prefetch_size (even 0, the default) is never overwritten."""
    result = run("Wan2_2_T2V_A14B_Config", explicit={"dit_offload_prefetch_size": 0.0})
    assert result.layerwise_offload_components[0] == "dit"
    assert result.dit_offload_prefetch_size == 0.0


def test_wan2_1_auto_gets_no_dit_layerwise(run):
    """Rule: in auto mode only Wan2.2 A14B gets DiT layerwise."""
    result = run("WanT2V720PConfig")
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder", "vae"]
    assert result.dit_offload_prefetch_size == 0.0


def test_wan2_2_a14b_rule_follows_class_name(run):
    """Rule: Wan2.2 A14B = class name starts 'Wan2_2_' and contains 'A14B' (unknown class)."""
    result = run(
        "Wan2_2_Custom_A14B_Config",
        pipeline={"task_type": "T2V", "is_wan_family": True},
        deployment={"auto_dit_layerwise_offload": True},
    )
    assert result.layerwise_offload_components[0] == "dit"
    assert result.dit_offload_prefetch_size == 2.0


def test_request_flag_overrides_a14b_name_rule(run):
    """Rule: request pipeline flags win over the derived facts."""
    result = run("Wan2_2_T2V_A14B_Config", pipeline={"is_wan2_2_a14b": False})
    assert "dit" not in result.layerwise_offload_components


@pytest.mark.parametrize(
    "config_class",
    ["TurboWanT2V480PConfig", "FastWan2_2_TI2V_5B_Config", "LingBotWorldCausalDMDConfig"],
)
def test_dmd_distilled_wan_memory_mode_gets_no_dit_layerwise(run, config_class):
    """Rule: dmd_denoising_steps set (DMD Wan) blocks the Wan DiT layerwise default."""
    result = run(config_class, explicit={"performance_mode": "memory"})
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder", "vae"]


def test_dmd_flag_from_request_blocks_dit_layerwise(run):
    """Rule: the request's dmd_denoising_steps_set decides, whatever the data says."""
    blocked = run(
        "WanT2V480PConfig",
        explicit={"performance_mode": "memory"},
        pipeline={"dmd_denoising_steps_set": True},
    )
    allowed = run(
        "TurboWanT2V480PConfig",
        explicit={"performance_mode": "memory"},
        pipeline={"dmd_denoising_steps_set": False},
    )
    assert "dit" not in blocked.layerwise_offload_components
    assert allowed.layerwise_offload_components[0] == "dit"


def test_non_wan_auto_dit_layerwise_opt_in_has_no_effect(run):
    """Rule: DiT layerwise defaults need the Wan family (MOVA opts in but is not Wan)."""
    result = run("MOVAPipelineConfig", explicit={"performance_mode": "memory"})
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder", "vae"]


# --- CPU -> layerwise replacement -----------------------------------------------------------


def test_replacement_moves_default_cpu_offload_to_layerwise_when_residency_skipped(run):
    """Rule: with residency skipped (explicit FSDP=False), default CPU offload goes layerwise."""
    result = run("TurboWanT2V1_3B480PConfig", free=80, explicit={"use_fsdp_inference": False})
    assert (
        "Automatically replacing CPU offload with layerwise offload for components: "
        "text_encoder, image_encoder" in result.logs
    )
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder"]
    assert result.text_encoder_cpu_offload is False
    assert result.image_encoder_cpu_offload is False
    assert result.dit_cpu_offload is True


def test_replacement_skips_explicit_cpu_offload_flags(run):
    """Rule: explicitly CPU-offloaded components are not replaced."""
    result = run(
        "TurboWanT2V1_3B480PConfig",
        free=80,
        explicit={"use_fsdp_inference": False, "text_encoder_cpu_offload": True},
    )
    assert result.layerwise_offload_components == ["image_encoder"]
    assert result.text_encoder_cpu_offload is True


def test_replacement_blocked_by_cache_dit(run):
    """Rule: cache-dit blocks the CPU -> layerwise replacement."""
    result = run(
        "TurboWanT2V1_3B480PConfig",
        free=80,
        explicit={"use_fsdp_inference": False},
        cache_dit=True,
    )
    assert result.layerwise_offload_components is None
    assert result.text_encoder_cpu_offload is True


def test_replacement_blocked_by_explicit_layerwise_policy(run):
    """Rule: explicit dit_layerwise_offload (even False) blocks the replacement."""
    result = run("TurboWanT2V1_3B480PConfig", free=80, explicit={"dit_layerwise_offload": False})
    assert result.layerwise_offload_components is None
    assert result.text_encoder_cpu_offload is True


# --- explicit-equal-to-default survives every step ------------------------------------------


def test_explicit_default_values_survive_every_step(run):
    """Rule: explicitly set means present, even when equal to the default, through all steps."""
    explicit = {
        "use_fsdp_inference": None,
        "vae_cpu_offload": False,
        "dit_offload_prefetch_size": 0.0,
        "enable_torch_compile": False,
        "num_gpus": 2,
    }
    result = run("ZImagePipelineConfig", explicit=explicit)
    assert result.explicit_args == sorted(explicit)
    # use_fsdp_inference: None is an explicit memory policy -> no auto FSDP, no residency
    assert result.use_fsdp_inference is False
    assert result.dit_cpu_offload is True
    # vae_cpu_offload explicit -> not in the default layerwise list
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder"]
    assert result.dit_offload_prefetch_size == 0.0
    assert result.enable_torch_compile is False
