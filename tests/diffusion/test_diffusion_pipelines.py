"""``pipeline_from_model_index``: diffusers class / HF repo id -> SGLang pipeline facts."""

from __future__ import annotations

import pytest

from scheduler_core.diffusion import PipelineInfo, pipeline_from_model_index, tune


@pytest.mark.parametrize(
    ("repo_id", "config_class", "task_type", "uses_cfg"),
    [
        ("Wan-AI/Wan2.2-T2V-A14B-Diffusers", "Wan2_2_T2V_A14B_Config", "T2V", True),
        ("Wan-AI/Wan2.2-I2V-A14B-Diffusers", "Wan2_2_I2V_A14B_Config", "I2V", True),
        ("Wan-AI/Wan2.2-TI2V-5B-Diffusers", "Wan2_2_TI2V_5B_Config", "TI2V", True),
        ("Wan-AI/Wan2.1-T2V-1.3B-Diffusers", "WanT2V480PConfig", "T2V", True),
        ("Wan-AI/Wan2.1-T2V-14B-Diffusers", "WanT2V720PConfig", "T2V", True),
        ("FastVideo/FastWan2.1-T2V-1.3B-Diffusers", "FastWan2_1_T2V_480P_Config", "T2V", True),
        ("Lightricks/LTX-2.3", "LTX23PipelineConfig", "TI2V", True),
        ("Lightricks/LTX-2", "LTX2PipelineConfig", "TI2V", True),
        ("Tongyi-MAI/Z-Image-Turbo", "ZImagePipelineConfig", "T2I", False),
        ("Tongyi-MAI/Z-Image", "ZImagePipelineConfig", "T2I", True),
        ("Qwen/Qwen-Image", "QwenImagePipelineConfig", "T2I", True),
        ("Qwen/Qwen-Image-2512", "QwenImagePipelineConfig", "T2I", True),
        ("Qwen/Qwen-Image-Edit", "QwenImageEditPipelineConfig", "I2I", True),
        ("Qwen/Qwen-Image-Edit-2509", "QwenImageEditPlusPipelineConfig", "I2I", True),
        ("black-forest-labs/FLUX.1-dev", "FluxPipelineConfig", "T2I", False),
        ("black-forest-labs/FLUX.2-dev", "Flux2PipelineConfig", "TI2I", False),
        ("black-forest-labs/FLUX.2-klein-base-4B", "Flux2KleinPipelineConfig", "TI2I", True),
        ("black-forest-labs/FLUX.2-klein-4B", "Flux2KleinPipelineConfig", "TI2I", False),
        ("hunyuanvideo-community/HunyuanVideo", "HunyuanConfig", "T2V", False),
        ("FastVideo/FastHunyuan-diffusers", "FastHunyuanConfig", "T2V", False),
    ],
)
def test_repo_id_rules(repo_id, config_class, task_type, uses_cfg):
    """Rule: repo-id rules map HF repos to the SGLang config class, task and CFG default.

    The task is the class's ``task_type`` default upstream (pipeline_configs/*.py).
    """
    info = pipeline_from_model_index(None, repo_id)
    assert info == PipelineInfo(
        pipeline_config_class=config_class, task_type=task_type, model_default_uses_cfg=uses_cfg
    )


@pytest.mark.parametrize(
    ("class_name", "config_class", "task_type", "uses_cfg"),
    [
        ("QwenImagePipeline", "QwenImagePipelineConfig", "T2I", True),
        ("QwenImageEditPipeline", "QwenImageEditPipelineConfig", "I2I", True),
        ("FluxPipeline", "FluxPipelineConfig", "T2I", False),
        ("Flux2Pipeline", "Flux2PipelineConfig", "TI2I", False),
        ("WanPipeline", "WanT2V480PConfig", "T2V", True),
        ("WanImageToVideoPipeline", "WanI2V480PConfig", "I2V", True),
        ("HunyuanVideoPipeline", "HunyuanConfig", "T2V", False),
        ("LTX2Pipeline", "LTX2PipelineConfig", "TI2V", True),
        ("LTXPipeline", "DiffusersGenericPipelineConfig", "T2V", True),
        ("ZImagePipeline", "ZImagePipelineConfig", "T2I", True),
        ("SanaPipeline", "SanaPipelineConfig", "T2I", True),
        ("StableDiffusion3Pipeline", "StableDiffusion3PipelineConfig", "T2I", True),
    ],
)
def test_class_name_rules(class_name, config_class, task_type, uses_cfg):
    """Rule: class-name rules; CFG default from the class's family fact when the rule omits it."""
    info = pipeline_from_model_index({"_class_name": class_name, "_diffusers_version": "0.36"}, None)
    assert info is not None
    assert (info.pipeline_config_class, info.task_type, info.model_default_uses_cfg) == (
        config_class,
        task_type,
        uses_cfg,
    )


def test_repo_id_rules_come_before_class_name_rules():
    """Rule: first match wins and repo-id rules are tried first."""
    info = pipeline_from_model_index({"_class_name": "WanPipeline"}, "Wan-AI/Wan2.2-T2V-A14B-Diffusers")
    assert info is not None
    assert info.pipeline_config_class == "Wan2_2_T2V_A14B_Config"


def test_unknown_repo_falls_back_to_class_name():
    """Rule: when no repo rule matches, the diffusers class name decides."""
    info = pipeline_from_model_index({"_class_name": "FluxPipeline"}, "someone/my-flux-finetune")
    assert info is not None
    assert info.pipeline_config_class == "FluxPipelineConfig"


def test_repo_id_match_is_case_insensitive_and_trims():
    """Rule: repo ids compare case-insensitively, ignoring surrounding spaces and slashes."""
    info = pipeline_from_model_index(None, "  qwen/QWEN-IMAGE/ ")
    assert info is not None
    assert info.pipeline_config_class == "QwenImagePipelineConfig"


def test_repo_id_must_match_in_full():
    """Rule: patterns match the whole repo id (no prefix matches)."""
    assert pipeline_from_model_index(None, "Qwen/Qwen-Image-Something-Else") is None


@pytest.mark.parametrize(
    ("model_index", "repo_id"),
    [
        (None, None),
        ({}, None),
        ({"_class_name": 3}, None),
        ({"_class_name": "UNet2DConditionPipeline"}, "someone/unknown"),
    ],
)
def test_nothing_matches_returns_none(model_index, repo_id):
    """Rule: None when no rule matches."""
    assert pipeline_from_model_index(model_index, repo_id) is None


def test_pipeline_info_feeds_tune(make_request):
    """Rule: the PipelineInfo is a valid Contract 2 ``pipeline`` section."""
    info = pipeline_from_model_index(None, "Wan-AI/Wan2.2-T2V-A14B-Diffusers")
    assert info is not None
    request = make_request()
    request["pipeline"] = info.model_dump()
    result = tune(request)
    assert result.layerwise_offload_components[0] == "dit"
    assert result.dit_offload_prefetch_size == 2.0
