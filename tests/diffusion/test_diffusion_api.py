"""Public API, request validation, result shape and determinism (Contract 2)."""

from __future__ import annotations

import json

import pydantic
import pytest

import scheduler_core.diffusion as diffusion
from scheduler_core.diffusion import TuneRequest, TuneResult, tune

CONTRACT_EXAMPLE = {
    "explicit_args": {"performance_mode": "auto", "num_gpus": 2, "use_fsdp_inference": False},
    "platform": {
        "kind": "cuda",
        "device_total_memory_gib": 80,
        "available_memory_gib_by_device": {"0": 80, "1": 78.5},
        "device_name": "NVIDIA H100 80GB HBM3",
    },
    "env": {"SGLANG_CACHE_DIT_ENABLED": False, "SGLANG_LTX2_TWO_STAGE_DEVICE_MODE": None},
    "pipeline": {
        "pipeline_config_class": "QwenImagePipelineConfig",
        "task_type": "T2I",
        "is_wan_family": False,
        "is_wan2_2_a14b": False,
        "dmd_denoising_steps_set": False,
        "model_default_uses_cfg": True,
        "is_ltx23_two_stage_pipeline": False,
    },
    "deployment_config": None,
}

RESULT_FLAGS = {
    "performance_mode",
    "enable_torch_compile",
    "use_fsdp_inference",
    "dit_cpu_offload",
    "dit_layerwise_offload",
    "layerwise_offload_components",
    "text_encoder_cpu_offload",
    "image_encoder_cpu_offload",
    "vae_cpu_offload",
    "dit_offload_prefetch_size",
    "enable_cfg_parallel",
    "cfg_parallel_degree",
    "tp_size",
    "sp_degree",
    "ulysses_degree",
    "ring_degree",
    "ltx2_two_stage_device_mode",
    "logs",
}


def test_public_api_exports():
    """Rule: the curated API is re-exported with __all__."""
    required = {
        "tune",
        "TuneRequest",
        "TuneResult",
        "DeploymentConfig",
        "PipelineInfo",
        "diffusion_args_from_cli",
        "tuned_cli_flags",
        "pipeline_from_model_index",
        "load_deployment_configs",
    }
    assert required <= set(diffusion.__all__)
    assert all(hasattr(diffusion, name) for name in diffusion.__all__)


def test_result_exposes_every_contract_field():
    """Rule: Contract 2 result fields are top-level, names exact."""
    assert RESULT_FLAGS <= set(TuneResult.model_fields)


def test_contract_example_request():
    """Rule: the contract's example: explicit FSDP=False keeps DiT offload, CFG parallel on 2 GPUs."""
    result = tune(CONTRACT_EXAMPLE)
    assert result.use_fsdp_inference is False
    assert result.dit_cpu_offload is True
    assert result.layerwise_offload_components == ["text_encoder", "image_encoder"]
    assert result.text_encoder_cpu_offload is False
    assert (result.enable_cfg_parallel, result.cfg_parallel_degree) == (True, 2)
    assert result.explicit_args == ["num_gpus", "performance_mode", "use_fsdp_inference"]


def test_same_request_gives_byte_identical_json():
    """Rule: deterministic; key order of the input does not matter."""
    reordered = json.loads(json.dumps(CONTRACT_EXAMPLE, sort_keys=True))
    reordered["explicit_args"] = dict(reversed(list(CONTRACT_EXAMPLE["explicit_args"].items())))
    first = tune(CONTRACT_EXAMPLE).model_dump_json()
    assert tune(CONTRACT_EXAMPLE).model_dump_json() == first
    assert tune(reordered).model_dump_json() == first


def test_tune_accepts_a_request_model():
    """Rule: a TuneRequest instance and its dict form give the same result."""
    request = TuneRequest.model_validate(CONTRACT_EXAMPLE)
    assert tune(request) == tune(CONTRACT_EXAMPLE)


def test_result_is_frozen():
    """Rule: TuneResult is frozen."""
    result = tune(CONTRACT_EXAMPLE)
    with pytest.raises(pydantic.ValidationError):
        result.tp_size = 4  # type: ignore[misc]


def test_unknown_fields_are_ignored(make_request):
    """Rule: unknown top-level and nested fields are ignored."""
    request = make_request()
    request["priority"] = "high"
    request["platform"]["driver"] = "550"
    request["pipeline"]["model_path"] = "/models/x"
    assert tune(request).performance_mode == "auto"


def test_unknown_explicit_args_count_as_explicit_but_are_ignored(run):
    """Rule: unknown ServerArgs names join the explicit set; their values are ignored."""
    result = run(explicit={"model_path": "Qwen/Qwen-Image", "pin_cpu_memory": {"odd": 1}})
    assert result.explicit_args == ["model_path", "pin_cpu_memory"]


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"explicit_args": {"num_gpus": "two"}}, "explicit_args.num_gpus"),
        ({"explicit_args": {"num_gpus": True}}, "explicit_args.num_gpus"),
        ({"explicit_args": {"use_fsdp_inference": 1}}, "explicit_args.use_fsdp_inference"),
        ({"explicit_args": {"num_gpus": 0}}, "explicit_args.num_gpus"),
        ({"explicit_args": {"layerwise_offload_components": 3}}, "layerwise_offload_components"),
        (
            {"explicit_args": {"ltx2_two_stage_device_mode": 2}},
            "explicit_args.ltx2_two_stage_device_mode",
        ),
        ({"env": {"SGLANG_LTX2_TWO_STAGE_DEVICE_MODE": True}}, "env.SGLANG_LTX2_TWO_STAGE_DEVICE_MODE"),
        ({"platform": {"kind": "tpu"}}, "platform.kind"),
        (
            {"platform": {"kind": "cuda", "available_memory_gib_by_device": {"0": -1}}},
            "platform.available_memory_gib_by_device",
        ),
        ({"pipeline": {"pipeline_config_class": "X", "task_type": "T2X"}}, "pipeline.task_type"),
        ({"env": {"SGLANG_CACHE_DIT_ENABLED": "sometimes"}}, "env.SGLANG_CACHE_DIT_ENABLED"),
        ({"deployment_config": {"keep_resident_components": "vae"}}, "deployment_config"),
    ],
)
def test_wrong_types_raise_value_error_naming_the_field(make_request, patch, field):
    """Rule: wrong types are rejected with a ValueError whose message names the field."""
    request = make_request()
    for key, value in patch.items():
        request[key] = {**(request[key] or {}), **value} if key != "deployment_config" else value
    with pytest.raises(ValueError, match=field):
        tune(request)


def test_missing_required_sections_name_the_field():
    """Rule: platform and pipeline are required."""
    with pytest.raises(ValueError, match="platform"):
        tune({"pipeline": {"pipeline_config_class": "QwenImagePipelineConfig"}})


def test_layerwise_components_accept_list_or_comma_string(run):
    """Rule: layerwise_offload_components may be a list or a comma string."""
    as_list = run(explicit={"layerwise_offload_components": ["text_encoder", "vae"]})
    as_text = run(explicit={"layerwise_offload_components": "text_encoder,vae"})
    assert as_list.layerwise_offload_components == as_text.layerwise_offload_components


def test_missing_device_memory_entry_names_the_field(make_request):
    """Rule: every selected device needs a free-memory entry."""
    request = make_request(explicit={"num_gpus": 2}, free={0: 80})
    with pytest.raises(ValueError, match=r"platform\.available_memory_gib_by_device.*\[1\]"):
        tune(request)


def test_missing_total_memory_names_the_field(make_request):
    """Rule: non-CPU offload pre-defaults read the device total memory."""
    with pytest.raises(ValueError, match=r"platform\.device_total_memory_gib"):
        tune(make_request(total=None, free=80))


def test_manual_mode_needs_no_memory_facts(make_request):
    """Rule: manual mode reads no memory (as upstream), so none has to be given."""
    request = make_request(explicit={"performance_mode": "manual"}, total=None)
    request["platform"]["available_memory_gib_by_device"] = {}
    assert tune(request).use_fsdp_inference is None


def test_pipeline_facts_derived_from_data_are_logged(run):
    """Rule: omitted pipeline flags are derived from the deployment data, and logged."""
    result = run("Wan2_2_T2V_A14B_Config")
    assert result.logs[1].startswith(
        "Pipeline facts for Wan2_2_T2V_A14B_Config: task_type=T2V, is_wan_family=True, "
        "is_wan2_2_a14b=True, dmd_denoising_steps_set=False, model_default_uses_cfg=True"
    )
    assert "not in the request, derived: task_type, is_wan_family" in result.logs[1]


def test_platform_kind_is_case_insensitive(run):
    """Rule: platform.kind accepts any case."""
    assert run(kind="ROCm").layerwise_offload_components is None
