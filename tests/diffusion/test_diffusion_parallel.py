"""Auto-FSDP, cache-dit, parallelism defaults and validation.

Upstream: ``ServerArgsAutoTuner.maybe_adjust_auto_fsdp_with_offload_enabled``,
``ServerArgs._adjust_parallelism``, ``_validate_offload``, ``_validate_parallelism`` and
``_validate_cfg_parallel``.
"""

from __future__ import annotations

import pytest

from scheduler_core.diffusion import tune
from scheduler_core.diffusion._deployments import DeploymentConfig
from scheduler_core.diffusion._models import PlatformInfo
from scheduler_core.diffusion._state import ResolvedPipeline, ServerArgsState, TuneContext
from scheduler_core.diffusion._validation import validate_offload, validate_parallelism

# SGLang's own texts (server_args.py: ServerArgs._validate_offload), typed out here
# independently of the module so a drift in either copy fails.
CACHE_DIT_FSDP_LOG = "cache-dit is enabled, automatically disabling use_fsdp_inference."
DIT_LAYERWISE_FSDP_LOG = (
    "layerwise offload is selected for DiT components, automatically disabling use_fsdp_inference."
)
NEGATIVE_PREFETCH_ERROR = "dit_offload_prefetch_size must be non-negative"
CACHE_DIT_FSDP_ERROR = (
    "FSDP inference cannot be enabled together with cache-dit. cache-dit wraps known DiT "
    "block structures, while FSDP wraps and shards modules before cache-dit can inspect "
    "them. Please disable --use-fsdp-inference or disable SGLANG_CACHE_DIT_ENABLED."
)
CACHE_DIT_DIT_LAYERWISE_ERROR = (
    "DiT layerwise offload cannot be enabled together with cache-dit. cache-dit may reuse "
    "skipped blocks whose weights have been released by layerwise offload, causing shape "
    "mismatch errors. Please disable --dit-layerwise-offload, remove DiT from "
    "--layerwise-offload-components, or disable SGLANG_CACHE_DIT_ENABLED."
)


def _tune_error(request: dict[str, object]) -> str:
    """tune() the request, expecting a ValueError; its text."""
    with pytest.raises(ValueError) as excinfo:
        tune(request)
    return str(excinfo.value)


# --- auto FSDP ------------------------------------------------------------------------------


def test_auto_fsdp_z_image_two_gpus_with_40gib_free_adds_cfg_parallel(run):
    """Rule: auto, 2 GPUs, Z-Image (>= 40 GiB free, uses CFG) -> FSDP replaces DiT offload."""
    result = run("ZImagePipelineConfig", explicit={"num_gpus": 2}, free={0: 80, 1: 40})
    assert (
        "Automatically selecting FSDP defaults for multi-GPU ZImagePipelineConfig to replace "
        "DiT offload" in result.logs
    )
    assert result.use_fsdp_inference is True
    assert result.dit_cpu_offload is False
    assert result.enable_cfg_parallel is True
    assert result.cfg_parallel_degree == 2
    assert (result.sp_degree, result.ulysses_degree, result.ring_degree) == (1, 1, 1)
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder", "vae"]


def test_auto_fsdp_z_image_four_gpus_splits_rest_to_sp(run):
    """Rule: 4 GPUs with CFG parallel 2 -> sp_degree 2, all Ulysses."""
    result = run("ZImagePipelineConfig", explicit={"num_gpus": 4})
    assert result.use_fsdp_inference is True
    assert result.cfg_parallel_degree == 2
    assert (result.sp_degree, result.ulysses_degree, result.ring_degree) == (2, 2, 1)


def test_auto_fsdp_skipped_below_memory_threshold(run):
    """Rule: auto FSDP needs min free >= fsdp_auto_min_available_memory_gb (Z-Image 40)."""
    result = run("ZImagePipelineConfig", explicit={"num_gpus": 2}, free={0: 80, 1: 39.5})
    assert (
        "Skipping automatic FSDP defaults: minimum available memory on selected GPUs 39.50 GiB "
        "is below 40.00 GiB for ZImagePipelineConfig" in result.logs
    )
    assert result.use_fsdp_inference is False
    assert result.dit_cpu_offload is True
    assert result.enable_cfg_parallel is True  # from the parallelism defaults


def test_auto_fsdp_reads_devices_from_base_gpu_id(run):
    """Rule: free memory is read on base_gpu_id..base_gpu_id+num_gpus-1 only."""
    result = run(
        "ZImagePipelineConfig",
        explicit={"num_gpus": 2, "base_gpu_id": 2},
        free={0: 1, 1: 1, 2: 80, 3: 80},
    )
    assert result.use_fsdp_inference is True


def test_auto_fsdp_never_with_one_gpu(run):
    """Rule: auto FSDP needs num_gpus >= 2."""
    result = run("ZImagePipelineConfig")
    assert result.use_fsdp_inference is False
    assert result.dit_cpu_offload is True


@pytest.mark.parametrize("explicit", [{"tp_size": 1}, {"enable_cfg_parallel": True}])
def test_auto_fsdp_blocked_by_explicit_parallel_policy(run, explicit):
    """Rule: fsdp_auto_requires_default_parallelism -> any parallel knob blocks auto FSDP."""
    result = run("ZImagePipelineConfig", explicit={"num_gpus": 2, **explicit})
    assert "Skipping automatic FSDP defaults because an explicit parallel policy is set" in result.logs
    assert result.use_fsdp_inference is False


def test_auto_fsdp_blocked_by_explicit_memory_policy(run):
    """Rule: an explicit memory-policy arg (here the default None) blocks auto FSDP."""
    result = run("ZImagePipelineConfig", explicit={"num_gpus": 2, "dit_layerwise_offload": None})
    assert result.use_fsdp_inference is False


def test_auto_fsdp_not_for_models_without_threshold(run):
    """Rule: fsdp_auto_min_available_memory_gb None (Qwen-Image) -> never auto FSDP."""
    result = run(explicit={"num_gpus": 2})
    assert result.use_fsdp_inference is False
    assert result.enable_cfg_parallel is True


def test_auto_fsdp_requires_cfg_model(run):
    """Rule: fsdp_auto_requires_cfg -> Z-Image-Turbo (no CFG) gets no FSDP, GPUs go to SP."""
    result = run(
        "ZImagePipelineConfig",
        explicit={"num_gpus": 2},
        pipeline={"model_default_uses_cfg": False},
    )
    assert result.use_fsdp_inference is False
    assert result.enable_cfg_parallel is False
    assert (result.sp_degree, result.ulysses_degree) == (2, 2)


@pytest.mark.parametrize(("free", "fsdp"), [(60.0, True), (59.0, False)])
def test_sana_wm_auto_fsdp_threshold_60(run, free, fsdp):
    """Rule: SANA-WM auto-FSDP threshold is 60 GiB."""
    result = run(
        "SanaWMPipelineConfig",
        explicit={"num_gpus": 2},
        free=free,
        pipeline={"task_type": "T2V"},
    )
    assert result.use_fsdp_inference is fsdp
    assert result.dit_cpu_offload is not fsdp


def test_fsdp_dropped_when_layerwise_selects_dit(run):
    """Rule: _validate_offload turns FSDP off when the layerwise list includes the DiT."""
    result = run(
        explicit={
            "num_gpus": 2,
            "use_fsdp_inference": True,
            "layerwise_offload_components": "transformer",
        }
    )
    assert result.use_fsdp_inference is False
    assert DIT_LAYERWISE_FSDP_LOG in result.logs


def test_deployment_config_from_request_enables_fsdp(run):
    """Rule: a request deployment_config replaces the catalog entry for this call."""
    result = run(
        explicit={"num_gpus": 2},
        deployment={"fsdp_auto_min_available_memory_gb": 30},
    )
    assert result.use_fsdp_inference is True
    assert result.logs[0] == (
        "Using the deployment config given in the request for QwenImagePipelineConfig: "
        "fsdp_auto_min_available_memory_gb=30.0"
    )


# --- cache-dit ------------------------------------------------------------------------------


def test_cache_dit_blocks_auto_fsdp(run):
    """Rule: SGLANG_CACHE_DIT_ENABLED -> no automatic FSDP (logged)."""
    result = run("ZImagePipelineConfig", explicit={"num_gpus": 2}, cache_dit=True)
    assert "Skipping automatic FSDP defaults because cache-dit is enabled" in result.logs
    assert result.use_fsdp_inference is False
    assert result.dit_cpu_offload is True


def test_cache_dit_blocks_speed_mode_fsdp(run):
    """Rule: cache-dit also blocks speed mode's FSDP."""
    result = run(
        "ZImagePipelineConfig",
        explicit={"performance_mode": "speed", "num_gpus": 2},
        cache_dit=True,
    )
    assert result.use_fsdp_inference is False


def test_cache_dit_with_explicit_fsdp_raises(make_request):
    """Rule: cache-dit + explicit use_fsdp_inference=True is an error, in SGLang's words."""
    with pytest.raises(ValueError) as excinfo:
        tune(make_request(explicit={"num_gpus": 2, "use_fsdp_inference": True}, cache_dit=True))
    assert str(excinfo.value) == CACHE_DIT_FSDP_ERROR


def test_validate_offload_explicit_fsdp_under_cache_dit_raises():
    """Rule: the explicit-FSDP error fires in _validate_offload itself and leaves FSDP on."""
    args = _state()
    ctx = _context(cache_dit=True, explicit=frozenset({"use_fsdp_inference"}))
    with pytest.raises(ValueError) as excinfo:
        validate_offload(args, ctx)
    assert str(excinfo.value) == CACHE_DIT_FSDP_ERROR
    assert args.use_fsdp_inference is True
    assert ctx.logs == []


@pytest.mark.parametrize(
    "explicit",
    [
        {"dit_layerwise_offload": True},
        {"layerwise_offload_components": "transformer,vae"},
        {"layerwise_offload_components": "all"},
    ],
)
def test_dit_layerwise_with_cache_dit_raises(make_request, explicit):
    """Rule: DiT layerwise offload (flag, a DiT name, or ``all``) + cache-dit is an error."""
    with pytest.raises(ValueError) as excinfo:
        tune(make_request(explicit=explicit, cache_dit=True))
    assert str(excinfo.value) == CACHE_DIT_DIT_LAYERWISE_ERROR


def test_cache_dit_blocks_wan_dit_layerwise_default(run):
    """Rule: cache-dit keeps the Wan2.2 A14B DiT out of the default layerwise list."""
    result = run("Wan2_2_T2V_A14B_Config", cache_dit=True)
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder", "vae"]
    assert result.dit_offload_prefetch_size == 0.0


def _context(cache_dit: bool, explicit: frozenset[str]) -> TuneContext:
    pipeline = ResolvedPipeline("QwenImagePipelineConfig", "T2I", False, False, False, True, False)
    return TuneContext(
        explicit=explicit,
        platform=PlatformInfo(kind="cuda", device_total_memory_gib=80),
        cache_dit_enabled=cache_dit,
        ltx2_env_mode=None,
        pipeline=pipeline,
        deployment=DeploymentConfig(),
    )


def _state(**overrides: object) -> ServerArgsState:
    values: dict[str, object] = {
        "performance_mode": "auto",
        "num_gpus": 2,
        "base_gpu_id": 0,
        "tp_size": 1,
        "sp_degree": 1,
        "ulysses_degree": 1,
        "ring_degree": 1,
        "enable_cfg_parallel": False,
        "cfg_parallel_degree": 1,
        "dp_size": 1,
        "use_fsdp_inference": True,
        "dit_cpu_offload": False,
        "dit_layerwise_offload": False,
        "layerwise_offload_components": None,
        "dit_offload_prefetch_size": 0.0,
        "text_encoder_cpu_offload": False,
        "image_encoder_cpu_offload": False,
        "vae_cpu_offload": False,
        "enable_torch_compile": False,
        "ltx2_two_stage_device_mode": None,
    }
    values.update(overrides)
    return ServerArgsState(**values)  # type: ignore[arg-type]


def test_validate_offload_drops_implicit_fsdp_under_cache_dit():
    """Rule: cache-dit + a non-explicit FSDP -> FSDP set to False (no error)."""
    args, ctx = _state(), _context(cache_dit=True, explicit=frozenset())
    validate_offload(args, ctx)
    assert args.use_fsdp_inference is False
    assert ctx.logs == [CACHE_DIT_FSDP_LOG]


# --- _validate_offload: prefetch size -----------------------------------------------------


def _prefetch_truncated_log(layers: int) -> str:
    # SGLang's log text (server_args.py: ServerArgs._validate_offload)
    return f"Invalid --dit-offload-prefetch-size value passed, truncated to: {layers}"


@pytest.mark.parametrize(("given", "layers"), [(2.5, 2), (1.5, 1)])
def test_fractional_prefetch_above_one_is_floored(run, given, layers):
    """Rule: a non-integer prefetch size above 1 (a layer count) is floored, and logged."""
    result = run(explicit={"dit_offload_prefetch_size": given})
    assert result.dit_offload_prefetch_size == float(layers)
    assert _prefetch_truncated_log(layers) in result.logs


@pytest.mark.parametrize("given", [0.75, 3.0])
def test_ratio_or_whole_prefetch_is_kept(run, given):
    """Rule: a ratio in (0, 1) or a whole layer count is left as given, with no log."""
    result = run(explicit={"dit_offload_prefetch_size": given})
    assert result.dit_offload_prefetch_size == given
    assert not any(line.startswith("Invalid --dit-offload-prefetch-size") for line in result.logs)


def test_negative_prefetch_with_layerwise_list_raises(make_request):
    """Rule: with a layerwise list (here a non-DiT one), a negative prefetch size is an error."""
    request = make_request(
        explicit={
            "performance_mode": "manual",
            "layerwise_offload_components": "vae",
            "dit_offload_prefetch_size": -1.0,
        }
    )
    assert _tune_error(request) == NEGATIVE_PREFETCH_ERROR


def test_negative_prefetch_without_layerwise_list_is_kept(run):
    """Rule: upstream checks the sign only when a layerwise list is set (manual: none is)."""
    result = run(explicit={"performance_mode": "manual", "dit_offload_prefetch_size": -1.0})
    assert result.layerwise_offload_components is None
    assert result.dit_offload_prefetch_size == -1.0


def test_cache_dit_fsdp_error_precedes_negative_prefetch(make_request):
    """Rule: the cache-dit + explicit FSDP check runs before the layerwise checks."""
    explicit = {
        "use_fsdp_inference": True,
        "layerwise_offload_components": "vae",
        "dit_offload_prefetch_size": -1.0,
    }
    assert _tune_error(make_request(explicit=explicit, cache_dit=True)) == CACHE_DIT_FSDP_ERROR


def test_negative_prefetch_precedes_cache_dit_layerwise_error(make_request):
    """Rule: inside the layerwise checks, the sign comes before the cache-dit DiT conflict."""
    explicit = {"dit_layerwise_offload": True, "dit_offload_prefetch_size": -1.0}
    assert _tune_error(make_request(explicit=explicit, cache_dit=True)) == NEGATIVE_PREFETCH_ERROR


def test_validate_offload_floors_prefetch_before_dropping_fsdp():
    """Rule: _validate_offload floors the prefetch size first, then drops an implicit FSDP."""
    args = _state(dit_offload_prefetch_size=2.5)
    ctx = _context(cache_dit=True, explicit=frozenset())
    validate_offload(args, ctx)
    assert (args.dit_offload_prefetch_size, args.use_fsdp_inference) == (2.0, False)
    assert ctx.logs == [_prefetch_truncated_log(2), CACHE_DIT_FSDP_LOG]


# --- parallelism defaults -------------------------------------------------------------------


def test_parallelism_defaults_single_gpu(run):
    """Rule: tp 1, CFG parallel off (degree 1), sp/ulysses/ring 1."""
    result = run()
    assert result.tp_size == 1
    assert result.enable_cfg_parallel is False
    assert result.cfg_parallel_degree == 1
    assert (result.sp_degree, result.ulysses_degree, result.ring_degree) == (1, 1, 1)


def test_auto_cfg_parallel_for_two_gpu_cfg_model(run):
    """Rule: >= 2 GPUs, CFG model, divisible, no sp/ulysses/ring -> CFG parallel degree 2."""
    result = run(explicit={"num_gpus": 2})
    assert "Auto CFG parallel for 2 GPU(s): cfg_parallel_degree=2, enable_cfg_parallel=True" in (result.logs)
    assert (result.enable_cfg_parallel, result.cfg_parallel_degree, result.sp_degree) == (
        True,
        2,
        1,
    )


def test_auto_cfg_parallel_off_for_model_without_cfg(run):
    """Rule: uses_cfg() False (FLUX.1) -> no CFG parallel; all GPUs to Ulysses SP."""
    result = run("FluxPipelineConfig", explicit={"num_gpus": 2})
    assert result.enable_cfg_parallel is False
    assert (result.sp_degree, result.ulysses_degree, result.ring_degree) == (2, 2, 1)


@pytest.mark.parametrize(
    ("num_gpus", "cfg", "degree", "sp"),
    [(2, True, 2, 1), (4, False, 1, 4), (8, False, 1, 8)],
)
def test_ltx2_cfg_degree_table_sends_4_and_8_gpus_to_sp(run, num_gpus, cfg, degree, sp):
    """Rule: LTX-2 auto_cfg_parallel_degree_by_num_gpus ((4,1),(8,1)); default degree 2."""
    result = run("LTX2PipelineConfig", explicit={"num_gpus": num_gpus})
    assert result.enable_cfg_parallel is cfg
    assert result.cfg_parallel_degree == degree
    assert (result.sp_degree, result.ulysses_degree) == (sp, sp)


def test_auto_cfg_parallel_blocked_by_explicit_sp(run):
    """Rule: an explicit sp/ulysses/ring degree keeps CFG parallel off."""
    result = run(explicit={"num_gpus": 4, "sp_degree": 4})
    assert result.enable_cfg_parallel is False
    assert (result.sp_degree, result.ulysses_degree, result.ring_degree) == (4, 4, 1)


def test_auto_cfg_parallel_requires_divisible_gpu_count(run):
    """Rule: num_gpus % (dp*tp*degree) must be 0 (3 GPUs, degree 2 -> off)."""
    result = run(explicit={"num_gpus": 3})
    assert result.enable_cfg_parallel is False
    assert (result.sp_degree, result.ulysses_degree) == (3, 3)


def test_deployment_can_disable_auto_cfg_parallel(run):
    """Rule: auto_enable_cfg_parallel False (SANA-WM realtime) -> no CFG parallel."""
    result = run(
        "SanaWMRealtimeConfig",
        explicit={"num_gpus": 2},
        pipeline={"task_type": "T2V", "model_default_uses_cfg": True},
    )
    assert result.enable_cfg_parallel is False
    assert result.sp_degree == 2


def test_explicit_cfg_parallel_degree_one_disables_cfg_parallel(run):
    """Rule: cfg_parallel_degree=1 forces CFG parallel off."""
    result = run(explicit={"num_gpus": 2, "cfg_parallel_degree": 1, "enable_cfg_parallel": True})
    assert result.enable_cfg_parallel is False
    assert result.cfg_parallel_degree == 1
    assert result.sp_degree == 2


def test_explicit_cfg_parallel_degree_above_one_enables_cfg_parallel(run):
    """Rule: cfg_parallel_degree > 1 forces CFG parallel on, even for a non-CFG model."""
    result = run("FluxPipelineConfig", explicit={"num_gpus": 4, "cfg_parallel_degree": 2})
    assert result.enable_cfg_parallel is True
    assert result.cfg_parallel_degree == 2
    assert result.sp_degree == 2


def test_explicit_enable_cfg_parallel_defaults_degree_two(run):
    """Rule: enable_cfg_parallel=True with no degree -> degree 2."""
    result = run("FluxPipelineConfig", explicit={"num_gpus": 2, "enable_cfg_parallel": True})
    assert (result.enable_cfg_parallel, result.cfg_parallel_degree, result.sp_degree) == (
        True,
        2,
        1,
    )


def test_explicit_ring_and_ulysses_are_kept(run):
    """Rule: explicit ring/ulysses are kept; sp fills from the GPU count."""
    result = run(explicit={"num_gpus": 4, "ring_degree": 2, "ulysses_degree": 2})
    assert (result.sp_degree, result.ulysses_degree, result.ring_degree) == (4, 2, 2)


# --- validation -----------------------------------------------------------------------------

# Expected texts are SGLang's (server_args.py: ServerArgs._validate_parallelism and
# _validate_cfg_parallel), typed out here independently of the module.


def test_validate_sp_degree_must_divide_num_gpus(make_request):
    """Rule: _validate_parallelism: sp_degree divides num_gpus (checked first)."""
    message = _tune_error(make_request(explicit={"num_gpus": 4, "sp_degree": 3}))
    assert message == "num_gpus (4) must be >= and divisible by sp_degree (3)"


def test_validate_sp_degree_above_num_gpus(make_request):
    """Rule: _validate_parallelism: sp_degree may not exceed num_gpus (same text)."""
    message = _tune_error(make_request(explicit={"num_gpus": 2, "sp_degree": 4}))
    assert message == "num_gpus (2) must be >= and divisible by sp_degree (4)"


def test_validate_num_gpus_multiple_of_dp_tp_cfg(make_request):
    """Rule: _validate_parallelism: num_gpus % (dp*tp*cfg) == 0; CFG degree named by value.

    3 GPUs, CFG parallel on (degree 2): sp defaults to 1 (3 % 2 != 0), group 1*1*2 = 2.
    """
    message = _tune_error(make_request(explicit={"num_gpus": 3, "enable_cfg_parallel": True}))
    assert message == "num_gpus (3) must be divisible by (dp_size * tp_size * 2) = 2"


def test_validate_num_gpus_multiple_of_dp_tp_without_cfg(make_request):
    """Rule: with CFG parallel off the message has no CFG factor (4 GPUs, tp 3: group 3)."""
    message = _tune_error(make_request(explicit={"num_gpus": 4, "tp_size": 3}))
    assert message == "num_gpus (4) must be divisible by (dp_size * tp_size) = 3"


def test_validate_num_gpus_multiple_of_explicit_cfg_degree(make_request):
    """Rule: cfg_parallel_degree 2 with tp 2 on 6 GPUs: group 1*2*2 = 4, 6 % 4 != 0."""
    message = _tune_error(make_request(explicit={"num_gpus": 6, "tp_size": 2, "cfg_parallel_degree": 2}))
    assert message == "num_gpus (6) must be divisible by (dp_size * tp_size * 2) = 4"


def test_validate_sp_equals_ring_times_ulysses(make_request):
    """Rule: _validate_parallelism: sp_degree == ring_degree * ulysses_degree (4 != 1 * 2)."""
    message = _tune_error(make_request(explicit={"num_gpus": 4, "ulysses_degree": 2}))
    assert message == "sp_degree (4) must equal ring_degree * ulysses_degree (1 * 2 = 2)"


def test_validate_dp_size_above_one_rejected(make_request):
    """Rule: _validate_parallelism: dp_size > 1 is rejected."""
    message = _tune_error(make_request(explicit={"num_gpus": 2, "dp_size": 2}))
    assert message == "DP is not yet supported"


def test_validate_dp_size_must_divide_num_gpus_before_dp_is_refused(make_request):
    """Rule: num_gpus % dp_size is checked before dp_size > 1 (3 GPUs, dp 2)."""
    message = _tune_error(make_request(explicit={"num_gpus": 3, "dp_size": 2}))
    assert message == "num_gpus (3) must be divisible by dp_size (2)"


def test_validate_dp_refused_before_sequence_split(make_request):
    """Rule: dp_size > 1 fires before sp == ring*ulysses (sp 4 // 2 = 2 vs ulysses 3)."""
    message = _tune_error(make_request(explicit={"num_gpus": 4, "dp_size": 2, "ulysses_degree": 3}))
    assert message == "DP is not yet supported"


def test_validate_parallelism_dp_size_below_one():
    """Rule: dp_size < 1 is upstream's natural-number error (a hand-built state: the
    request model already refuses it). -1 divides 2, so the divisibility check passes."""
    args = _state(dp_size=-1)
    with pytest.raises(ValueError) as excinfo:
        validate_parallelism(args, _context(cache_dit=False, explicit=frozenset()))
    assert str(excinfo.value) == "--dp-size must be a natural number"


def test_validate_cfg_parallel_needs_two_gpus(make_request):
    """Rule: _validate_cfg_parallel: CFG parallel with 1 GPU is an error.

    On CPU (no parallelism validation) this check is the one that fires.
    """
    message = _tune_error(make_request(explicit={"enable_cfg_parallel": True}, kind="cpu"))
    assert message == "CFG Parallelism is enabled via `--enable-cfg-parallel`, but num_gpus == 1"


def test_validate_cfg_parallel_one_gpu_on_cuda_fails_divisibility_first(make_request):
    """Rule: _validate_parallelism runs before _validate_cfg_parallel (1 % (1*1*2) != 0)."""
    message = _tune_error(make_request(explicit={"enable_cfg_parallel": True}))
    assert message == "num_gpus (1) must be divisible by (dp_size * tp_size * 2) = 2"


def test_cpu_skips_parallelism_validation(run):
    """Rule: _validate_parallelism is not run on CPU."""
    result = run(explicit={"num_gpus": 4, "sp_degree": 3}, kind="cpu")
    assert result.sp_degree == 3
