"""Performance modes and platforms (flow steps 1 and 8).

Upstream: ``ServerArgsAutoTuner.adjust_based_on_performance_mode`` and
``ServerArgs._adjust_platform_specific``.
"""

from __future__ import annotations

import pytest

from scheduler_core.diffusion import tune

INVALID_MODE_TEXT = "Invalid performance_mode='turbo'. Expected one of ('manual', 'auto', 'speed', 'memory')."
RESIDENT_LOG = (
    "Applied GPU-resident performance defaults: use_fsdp_inference={fsdp}, dit_cpu_offload=False, "
    "dit_layerwise_offload=False, text_encoder_cpu_offload=False, image_encoder_cpu_offload=False"
)


# --- mode normalisation -------------------------------------------------------------------


def test_invalid_performance_mode_raises_upstream_text(make_request):
    """Rule: anything outside PERFORMANCE_MODES is a ValueError with upstream's text."""
    with pytest.raises(ValueError) as caught:
        tune(make_request(explicit={"performance_mode": "turbo"}))
    assert str(caught.value) == INVALID_MODE_TEXT


def test_invalid_performance_mode_keeps_original_spelling_in_error(make_request):
    """Rule: the error quotes the value as given (repr), not the lower-cased one."""
    with pytest.raises(ValueError, match=r"^Invalid performance_mode='Fast'\. Expected one of"):
        tune(make_request(explicit={"performance_mode": "Fast"}))


def test_invalid_performance_mode_rejected_on_cpu_too(make_request):
    """Rule: normalisation happens before the CPU early return."""
    with pytest.raises(ValueError, match="Invalid performance_mode"):
        tune(make_request(explicit={"performance_mode": "turbo"}, kind="cpu"))


@pytest.mark.parametrize(("given", "expected"), [("SPEED", "speed"), ("Memory", "memory")])
def test_performance_mode_is_case_insensitive(run, given, expected):
    """Rule: the mode is lower-cased."""
    assert run(explicit={"performance_mode": given}).performance_mode == expected


@pytest.mark.parametrize("given", [None, ""])
def test_performance_mode_none_or_empty_means_auto(run, given):
    """Rule: ``(performance_mode or "auto")``."""
    assert run(explicit={"performance_mode": given}).performance_mode == "auto"


def test_performance_mode_defaults_to_auto(run):
    """Rule: ServerArgs.performance_mode defaults to auto."""
    result = run()
    assert result.performance_mode == "auto"
    assert result.explicit_args == []


# --- speed ----------------------------------------------------------------------------------


def test_speed_mode_enables_torch_compile_when_not_explicit(run):
    """Rule: speed turns torch.compile on by default, with upstream's log line."""
    result = run(explicit={"performance_mode": "speed"})
    assert result.enable_torch_compile is True
    assert "Applying performance_mode=speed" in result.logs
    assert (
        "performance_mode=speed enables torch.compile "
        "(pass --enable-torch-compile false to opt out)" in result.logs
    )


def test_speed_mode_keeps_explicit_torch_compile_false(run):
    """Rule: an explicit --enable-torch-compile false (equal to the default) still wins."""
    result = run(explicit={"performance_mode": "speed", "enable_torch_compile": False})
    assert result.enable_torch_compile is False
    assert not any("enables torch.compile" in line for line in result.logs)


def test_speed_mode_single_gpu_sets_gpu_resident_defaults(run):
    """Rule: speed without FSDP keeps every component resident (use_fsdp False)."""
    result = run(explicit={"performance_mode": "speed"})
    assert RESIDENT_LOG.format(fsdp=False) in result.logs
    assert result.use_fsdp_inference is False
    assert result.dit_cpu_offload is False
    assert result.dit_layerwise_offload is False
    assert result.text_encoder_cpu_offload is False
    assert result.image_encoder_cpu_offload is False
    assert result.layerwise_offload_components is None


def test_speed_mode_fsdp_with_two_gpus_when_model_supports_fsdp(run):
    """Rule: speed + >=2 GPUs + supports_fsdp -> FSDP and CFG parallel; no memory headroom."""
    result = run("ZImagePipelineConfig", explicit={"performance_mode": "speed", "num_gpus": 2}, free=8)
    assert RESIDENT_LOG.format(fsdp=True) in result.logs
    assert result.use_fsdp_inference is True
    assert result.dit_cpu_offload is False
    assert result.enable_cfg_parallel is True
    assert result.cfg_parallel_degree == 2


def test_speed_mode_no_fsdp_with_one_gpu(run):
    """Rule: speed FSDP needs num_gpus >= 2."""
    result = run("ZImagePipelineConfig", explicit={"performance_mode": "speed"})
    assert result.use_fsdp_inference is False
    assert result.enable_cfg_parallel is False


def test_speed_mode_no_fsdp_without_fsdp_threshold(run):
    """Rule: supports_fsdp needs fsdp_auto_min_available_memory_gb (Qwen has none).

    CFG parallel still comes from the parallelism defaults.
    """
    result = run(explicit={"performance_mode": "speed", "num_gpus": 2})
    assert result.use_fsdp_inference is False
    assert result.enable_cfg_parallel is True
    assert result.cfg_parallel_degree == 2


def test_speed_mode_no_fsdp_when_model_skips_cfg(run):
    """Rule: fsdp_auto_requires_cfg -> no FSDP for a model without default CFG (Z-Image-Turbo)."""
    result = run(
        "ZImagePipelineConfig",
        explicit={"performance_mode": "speed", "num_gpus": 2},
        pipeline={"model_default_uses_cfg": False},
    )
    assert result.use_fsdp_inference is False
    assert result.enable_cfg_parallel is False
    assert result.sp_degree == 2


def test_speed_mode_fsdp_ignores_explicit_parallel_policy(run):
    """Rule: the explicit-parallel FSDP block applies to auto mode only.

    The explicit sp_degree still stops CFG parallel (tuner and defaults).
    """
    result = run(
        "ZImagePipelineConfig",
        explicit={"performance_mode": "speed", "num_gpus": 2, "sp_degree": 2},
    )
    assert result.use_fsdp_inference is True
    assert result.enable_cfg_parallel is False
    assert (result.sp_degree, result.ulysses_degree, result.ring_degree) == (2, 2, 1)


# --- memory ---------------------------------------------------------------------------------


def test_memory_mode_cuda_applies_layerwise_defaults(run):
    """Rule: memory on CUDA -> default layerwise list, DiT CPU offload, encoders resident."""
    result = run(explicit={"performance_mode": "memory"})
    assert "Applying performance_mode=memory" in result.logs
    assert result.use_fsdp_inference is False
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder", "vae"]
    assert result.dit_cpu_offload is True
    assert result.text_encoder_cpu_offload is False
    assert result.image_encoder_cpu_offload is False
    assert result.vae_cpu_offload is False


@pytest.mark.parametrize("kind", ["rocm", "npu"])
def test_memory_mode_non_cuda_applies_component_offload_defaults(run, kind):
    """Rule: memory off CUDA -> DiT/text/image CPU offload, no layerwise."""
    result = run(explicit={"performance_mode": "memory"}, kind=kind)
    assert (
        "Applied low-memory component offload defaults: dit_cpu_offload=True, "
        "text_encoder_cpu_offload=True, image_encoder_cpu_offload=True" in result.logs
    )
    assert result.use_fsdp_inference is False
    assert result.layerwise_offload_components is None
    assert result.dit_cpu_offload is True
    assert result.text_encoder_cpu_offload is True
    assert result.image_encoder_cpu_offload is True
    assert result.vae_cpu_offload is False


def test_memory_mode_with_explicit_fsdp_stays_resident_with_aux_layerwise(run):
    """Rule: memory + use_fsdp_inference=True -> resident(FSDP) + default aux layerwise (CUDA)."""
    result = run(explicit={"performance_mode": "memory", "use_fsdp_inference": True, "num_gpus": 2})
    assert result.use_fsdp_inference is True
    assert result.dit_cpu_offload is False
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder", "vae"]
    assert result.enable_cfg_parallel is True


def test_memory_mode_wan_puts_dit_first_in_layerwise(run):
    """Rule: memory mode, Wan family with auto_dit_layerwise_offload -> ``dit`` group first."""
    result = run("WanT2V480PConfig", explicit={"performance_mode": "memory"})
    assert result.layerwise_offload_components == ["dit", "text_encoder", "image_encoder", "vae"]
    assert result.dit_cpu_offload is True
    assert result.dit_offload_prefetch_size == 0.0  # the A14B prefetch is auto-mode only


def test_memory_mode_wan_explicit_dit_cpu_offload_blocks_dit_layerwise(run):
    """Rule: explicit dit_cpu_offload keeps the DiT out of the default layerwise set."""
    result = run("WanT2V480PConfig", explicit={"performance_mode": "memory", "dit_cpu_offload": True})
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder", "vae"]


@pytest.mark.parametrize("kind", ["rocm", "npu"])
def test_memory_mode_wan_off_cuda_gets_no_dit_layerwise(run, kind):
    """Rule: Wan DiT layerwise by default is CUDA-only (ROCm/NPU predicate False)."""
    result = run("WanT2V480PConfig", explicit={"performance_mode": "memory"}, kind=kind)
    assert result.layerwise_offload_components is None
    assert result.dit_cpu_offload is True


# --- manual ---------------------------------------------------------------------------------


def test_manual_mode_leaves_memory_flags_unset(run):
    """Rule: manual skips offload pre-defaults, the auto steps and finalize (flags stay None)."""
    result = run(explicit={"performance_mode": "manual"})
    assert result.use_fsdp_inference is None
    assert result.dit_cpu_offload is None
    assert result.dit_layerwise_offload is None
    assert result.text_encoder_cpu_offload is None
    assert result.image_encoder_cpu_offload is None
    assert result.layerwise_offload_components is None
    assert result.vae_cpu_offload is False
    assert result.enable_torch_compile is False
    assert (result.tp_size, result.sp_degree, result.cfg_parallel_degree) == (1, 1, 1)


def test_manual_mode_never_auto_enables_cfg_parallel(run):
    """Rule: auto CFG parallel needs mode != manual; the GPUs go to Ulysses SP instead."""
    result = run(explicit={"performance_mode": "manual", "num_gpus": 2})
    assert result.enable_cfg_parallel is False
    assert (result.sp_degree, result.ulysses_degree, result.ring_degree) == (2, 2, 1)


def test_manual_mode_still_normalises_layerwise_list(run):
    """Rule: normalisation (step 9) runs in every mode."""
    result = run(explicit={"performance_mode": "manual", "layerwise_offload_components": "Text-Encoder,VAE"})
    assert result.layerwise_offload_components == ["text_encoder", "vae"]
    assert result.text_encoder_cpu_offload is False
    assert result.dit_cpu_offload is None


# --- platforms ------------------------------------------------------------------------------


def test_cpu_returns_early_after_mode_normalisation(make_request):
    """Rule: on CPU the mode step only normalises; no compile, no memory reads."""
    request = make_request(explicit={"performance_mode": "SPEED"}, kind="cpu", total=None)
    request["platform"]["available_memory_gib_by_device"] = {}
    result = tune(request)
    assert result.performance_mode == "speed"
    assert result.enable_torch_compile is False
    assert "Applying performance_mode=speed" not in result.logs
    assert result.use_fsdp_inference is False  # finalize still runs
    assert result.dit_cpu_offload is False
    assert result.layerwise_offload_components is None


def test_cpu_with_tp_size_sets_num_gpus(run):
    """Rule: on CPU, tp_size > 1 sets num_gpus = tp_size."""
    result = run(explicit={"tp_size": 2}, kind="cpu")
    assert result.num_gpus == 2
    assert result.tp_size == 2
    assert result.enable_cfg_parallel is False  # 2 % (1*2*2) != 0
    assert result.sp_degree == 1


def test_mps_platform_clears_fsdp_layerwise_and_cpu_offload(run):
    """Rule: MPS platform step clears FSDP/layerwise and sets every *_cpu_offload False."""
    result = run(
        explicit={
            "dit_cpu_offload": True,
            "vae_cpu_offload": True,
            "layerwise_offload_components": ["vae"],
            "dit_layerwise_offload": True,
        },
        kind="mps",
    )
    assert result.use_fsdp_inference is False
    assert result.dit_layerwise_offload is False
    assert result.layerwise_offload_components is None
    assert result.dit_cpu_offload is False
    assert result.text_encoder_cpu_offload is False
    assert result.image_encoder_cpu_offload is False
    assert result.vae_cpu_offload is False
    assert any(line.startswith("MPS platform: use_fsdp_inference=False") for line in result.logs)


def test_mps_memory_mode_offload_defaults_are_cleared(run):
    """Rule: MPS runs after the mode step, so memory mode's CPU offload is undone."""
    result = run(explicit={"performance_mode": "memory"}, kind="mps")
    assert "Applying performance_mode=memory" in result.logs
    assert result.dit_cpu_offload is False
    assert result.text_encoder_cpu_offload is False


@pytest.mark.parametrize("kind", ["rocm", "npu"])
def test_auto_mode_off_cuda_keeps_cpu_offload_predefaults(run, kind):
    """Rule: auto default layerwise and the layerwise replacement are CUDA-only."""
    result = run(kind=kind)
    assert result.layerwise_offload_components is None
    assert result.dit_cpu_offload is True
    assert result.text_encoder_cpu_offload is True
    assert result.image_encoder_cpu_offload is False


def test_auto_mode_cuda_replaces_encoder_offload_with_layerwise(run):
    """Rule: same model on CUDA -> auto default layerwise list, encoders leave CPU offload."""
    result = run()
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder"]
    assert result.dit_cpu_offload is True
    assert result.text_encoder_cpu_offload is False
