"""Diffusion launch planning inside schedule(): the auto-tuner runs on the chosen GPUs."""

from __future__ import annotations

from builders import GIB, H100, MI300X, RTX_4090, gpu, model, request, uniform_worker, worker

from scheduler_core import schedule


def z_image(**overrides):
    row = model(
        name="z-image",
        categories=["image"],
        hf_config=None,
        huggingface_repo_id="Tongyi-MAI/Z-Image",
        weight_bytes=19 * GIB,
    )
    row.update(overrides)
    return row


def flag(args, name):
    return args[args.index(name) + 1]


def test_two_h100_auto_selects_fsdp_with_cfg_parallel():
    """Rule: auto-FSDP (Z-Image: >= 40 GiB free, uses CFG, >= 2 GPUs) replaces DiT offload and
    enables CFG parallel; num_gpus is the candidate's GPU count; no LLM --tp-size/--mem-fraction-static."""
    selector = {"gpu_ids": ["pair:cuda:0", "pair:cuda:1"]}
    result = schedule(request(z_image(gpu_selector=selector), [uniform_worker(1, "pair", 2, H100)]))
    plan = result.launch.diffusion
    assert plan["pipeline_config_class"] == "ZImagePipelineConfig"
    assert (plan["num_gpus"], plan["flags"]["use_fsdp_inference"], plan["flags"]["dit_cpu_offload"]) == (
        2,
        True,
        False,
    )
    assert (plan["flags"]["enable_cfg_parallel"], plan["flags"]["cfg_parallel_degree"]) == (True, 2)
    args = result.launch.backend_parameters
    assert flag(args, "--num-gpus") == "2"
    assert args.count("--tp-size") == 1 and flag(args, "--tp-size") == "1"  # the tuner's, not GPU count
    assert "--mem-fraction-static" not in args
    tuner_events = [e.message for e in result.events if e.action == "diffusion_launch_plan"]
    assert tuner_events == plan["logs"] and tuner_events


def test_small_gpu_offloads_everything_then_goes_layerwise():
    """Rule: _adjust_offload total < 30 GiB → dit/text/image offload; auto layerwise replaces text/image
    CPU offload (threshold 45 GiB for image tasks not met, so vae stays in the list)."""
    result = schedule(request(z_image(), [uniform_worker(1, "desk", 1, RTX_4090)]))
    flags = result.launch.diffusion["flags"]
    assert flags["layerwise_offload_components"] == ["text_encoder", "image_encoder", "vae"]
    assert (flags["dit_cpu_offload"], flags["text_encoder_cpu_offload"], flags["use_fsdp_inference"]) == (
        True,
        False,
        False,
    )


def test_performance_mode_and_explicit_flags_come_from_backend_parameters():
    """Rule: --performance-mode sets the mode; a flag given by the user is explicit and not re-emitted."""
    params = ["--performance-mode", "SPEED", "--dit-cpu-offload", "false"]
    result = schedule(request(z_image(backend_parameters=params), [uniform_worker(1, "big", 1, H100)]))
    plan = result.launch.diffusion
    assert plan["performance_mode"] == "speed"
    assert plan["flags"]["enable_torch_compile"] is True  # speed mode compiles unless explicit
    assert "dit_cpu_offload" in plan["explicit_args"]
    assert result.launch.backend_parameters.count("--dit-cpu-offload") == 1


def test_tuner_refusal_keeps_the_placement_and_reports_it():
    """Rule: GPUStack places the model whatever its diffusion flags; when the tuner refuses them
    (upstream's text) the decision stays scheduled and carries the error and an ERROR event."""
    bad = z_image(backend_parameters=["--performance-mode", "turbo"])
    result = schedule(request(bad, [uniform_worker(1, "big", 1, H100)]))
    assert result.status == "scheduled"
    message = "Invalid performance_mode='turbo'. Expected one of ('manual', 'auto', 'speed', 'memory')."
    assert result.launch.diffusion["error"] == {
        "code": "invalid_diffusion_arguments",
        "message": message,
        "field": "model.backend_parameters",
    }
    assert result.launch.backend_parameters == ["--performance-mode", "turbo"]
    assert (result.events[-1].level, result.events[-1].message) == ("error", message)


def test_malformed_diffusion_flag_keeps_the_placement_and_reports_it():
    """Rule: GPUStack places an IMAGE model whatever its diffusion flags say (a non-integer
    --num-gpus reads as unset); SGLang's argument parser would refuse it at start-up, so the
    launch plan carries that error instead of a plan."""
    bad = z_image(backend_parameters=["--num-gpus", "two"])
    result = schedule(request(bad, [uniform_worker(1, "big", 1, H100)]))
    assert result.status == "scheduled"
    error = result.launch.diffusion["error"]
    assert (error["code"], error["field"]) == ("invalid_backend_parameters", "model.backend_parameters")
    assert "two" in error["message"]
    assert result.events[-1].level == "error"


def test_unknown_pipeline_falls_back_to_diffusers_generic():
    """Rule: unknown pipeline → diffusers-generic base config (with the tuner's fallback log)."""
    unknown = z_image(huggingface_repo_id="someone/private-diffusion")
    result = schedule(request(unknown, [uniform_worker(1, "big", 1, H100)]))
    assert result.launch.diffusion["pipeline_config_class"] == "DiffusersGenericPipelineConfig"


def test_rocm_gpu_gets_no_cuda_only_layerwise_defaults():
    """Rule: layerwise defaults only on CUDA; ROCm keeps the CPU-offload pre-defaults."""
    amd = worker(1, "mi300", [gpu(0, MI300X, type_="rocm", vendor="amd")])
    result = schedule(request(z_image(), [amd]))
    flags = result.launch.diffusion["flags"]
    assert flags["layerwise_offload_components"] is None
    assert result.launch.diffusion["flags"]["num_gpus"] == 1


def test_num_gpus_sizes_the_diffusion_placement():
    """Rule (gpusched): SGLang Diffusion runs on --num-gpus GPUs, so the placement takes that many."""
    result = schedule(
        request(z_image(backend_parameters=["--num-gpus", "2"]), [uniform_worker(1, "pair", 2, H100)])
    )
    assert result.candidates[result.selected].gpu_indexes == [0, 1]
    assert result.launch.diffusion["num_gpus"] == 2
    assert result.launch.backend_parameters.count("--num-gpus") == 1


def test_dp_size_reaches_the_tuner_validation():
    """Rule: upstream _validate_parallelism refuses dp_size > 1 (the flag is not dropped)."""
    result = schedule(
        request(z_image(backend_parameters=["--dp-size", "2"]), [uniform_worker(1, "pair", 2, H100)])
    )
    assert result.status == "scheduled"  # GPUStack's placement: dp 2 → 2 GPUs
    assert result.launch.diffusion["error"]["field"] == "model.backend_parameters"
    # SGLang's text (server_args.py: ServerArgs._validate_parallelism)
    assert result.launch.diffusion["error"]["message"] == "DP is not yet supported"


def test_tuner_input_errors_name_the_field():
    """Bad input: a malformed tuner input names its model field and location."""
    bad = z_image(backend_parameters=["--ltx2-two-stage-device-mode", "bogus"])
    result = schedule(request(bad, [uniform_worker(1, "big", 1, H100)]))
    assert result.launch.diffusion["error"] == {
        "code": "invalid_backend_parameters",
        "message": "--ltx2-two-stage-device-mode: invalid choice 'bogus' "
        "(choose from 'original', 'resident', 'snapshot')",
        "field": "model.backend_parameters",
    }
    bad = z_image(backend_parameters=["--num-gpus", "1", "--cfg-parallel-degree", "0"])
    result = schedule(request(bad, [uniform_worker(1, "big", 1, H100)]))
    assert result.launch.diffusion["error"]["message"].startswith("explicit_args.cfg_parallel_degree")


def test_ltx2_env_is_not_read_for_other_pipelines():
    """Rule: upstream reads SGLANG_LTX2_TWO_STAGE_DEVICE_MODE only for LTX-2.3 two-stage pipelines."""
    model = z_image(env={"SGLANG_LTX2_TWO_STAGE_DEVICE_MODE": "bogus"})
    result = schedule(request(model, [uniform_worker(1, "big", 1, H100)]))
    assert "error" not in result.launch.diffusion
    assert result.launch.diffusion["flags"]["ltx2_two_stage_device_mode"] is None


def test_cache_dit_env_reads_like_sglang():
    """Rule: SGLang reads SGLANG_CACHE_DIT_ENABLED as true only for 'true'/'1'."""
    selector = {"gpu_ids": ["pair:cuda:0", "pair:cuda:1"]}
    on = schedule(
        request(
            z_image(gpu_selector=selector, env={"SGLANG_CACHE_DIT_ENABLED": "1"}),
            [uniform_worker(1, "pair", 2, H100)],
        )
    )
    yes = schedule(
        request(
            z_image(gpu_selector=selector, env={"SGLANG_CACHE_DIT_ENABLED": "yes"}),
            [uniform_worker(1, "pair", 2, H100)],
        )
    )
    assert on.launch.diffusion["flags"]["use_fsdp_inference"] is False  # cache-dit blocks auto-FSDP
    assert yes.launch.diffusion["flags"]["use_fsdp_inference"] is True
