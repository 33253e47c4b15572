"""The deployment-config and pipeline-rule data files and their loaders.

Upstream: ``ModelDeploymentConfig`` (defaults) and the per-pipeline values set in
SGLang multimodal-gen's ``configs/pipeline_configs/*.py`` at bd3f6a79.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler_core.diffusion import (
    DeploymentConfig,
    load_deployment_configs,
    load_pipeline_rules,
    tune,
)
from scheduler_core.diffusion._deployments import default_configs_dir, is_wan2_2_a14b_name

REPO_CONFIGS = Path(__file__).resolve().parents[2] / "configs"

#: Pipeline config classes whose deployment values upstream sets (directly or by inheritance),
#: plus FastHunyuan, HunyuanVideo, Pi0.5 and Qwen-Image, which keep the defaults.
PINNED_PIPELINE_CLASSES = (
    "WanT2V480PConfig",
    "WanT2V720PConfig",
    "TurboWanT2V480PConfig",
    "Wan2_2_TI2V_5B_Config",
    "FastWan2_2_TI2V_5B_Config",
    "Wan2_2_T2V_A14B_Config",
    "SelfForcingWanT2V480PConfig",
    "LongLive2T2VConfig",
    "WanI2V480PConfig",
    "WanI2V720PConfig",
    "TurboWanI2V720Config",
    "Wan2_2_I2V_A14B_Config",
    "LingBotWorldI2VConfig",
    "LingBotWorldCausalDMDConfig",
    "LingBotWorldV2CausalDMDConfig",
    "TurboWanT2V1_3B480PConfig",
    "FastWan2_1_T2V_480P_Config",
    "MOVAPipelineConfig",
    "MOVA360PConfig",
    "MOVA720PConfig",
    "LTX2PipelineConfig",
    "LTX2I2VPipelineConfig",
    "LTX23PipelineConfig",
    "JoyEchoPipelineConfig",
    "ZImagePipelineConfig",
    "SanaWMPipelineConfig",
    "SanaWMRealtimeConfig",
    "FastHunyuanConfig",
    "HunyuanConfig",
    "Pi05PipelineConfig",
    "QwenImagePipelineConfig",
)

WAN_LAYERWISE = {"auto_dit_layerwise_offload": True}
DMD_RESIDENT = {
    "auto_dit_layerwise_offload": True,
    "keep_resident_min_available_gb": 60.0,
    "keep_resident_components": ("text_encoder", "image_encoder", "vae"),
}
LTX = {
    "keep_resident_min_available_gb": 70.0,
    "keep_resident_components": ("dit",),
    "auto_cfg_parallel_degree_by_num_gpus": ((4, 1), (8, 1)),
}
MOVA = {
    "auto_dit_layerwise_offload": True,
    "auto_dit_layerwise_offload_high_memory_disable_gb": 130,
}

#: (class, non-default fields) as upstream's pipeline configs set them, inheritance resolved.
EXPECTED_NON_DEFAULTS = [
    *[(name, WAN_LAYERWISE) for name in PINNED_PIPELINE_CLASSES[:15]],
    ("TurboWanT2V1_3B480PConfig", DMD_RESIDENT),
    ("FastWan2_1_T2V_480P_Config", DMD_RESIDENT),
    ("MOVAPipelineConfig", MOVA),
    ("MOVA360PConfig", MOVA),
    ("MOVA720PConfig", MOVA),
    ("LTX2PipelineConfig", LTX),
    ("LTX2I2VPipelineConfig", LTX),
    ("LTX23PipelineConfig", LTX),
    ("JoyEchoPipelineConfig", LTX),
    ("ZImagePipelineConfig", {"fsdp_auto_min_available_memory_gb": 40.0}),
    (
        "SanaWMPipelineConfig",
        {"auto_dit_layerwise_offload": True, "fsdp_auto_min_available_memory_gb": 60.0},
    ),
    (
        "SanaWMRealtimeConfig",
        {
            "auto_dit_layerwise_offload": True,
            "keep_resident_min_available_gb": 120.0,
            "keep_resident_components": ("dit",),
            "auto_enable_cfg_parallel": False,
        },
    ),
    ("FastHunyuanConfig", {}),
    ("HunyuanConfig", {}),
    ("Pi05PipelineConfig", {}),
    ("QwenImagePipelineConfig", {}),
]


def test_default_configs_dir_is_repo_configs():
    """Rule: the loader looks in <repo>/configs unless a directory is passed."""
    assert default_configs_dir() == REPO_CONFIGS


def test_every_deployment_entry_loads_and_validates():
    """Rule: the whole file validates (pydantic); every entry is usable."""
    catalog = load_deployment_configs()
    assert set(PINNED_PIPELINE_CLASSES) <= set(catalog.pipelines)
    for entry in catalog.pipelines.values():
        assert isinstance(entry.deployment, DeploymentConfig)


@pytest.mark.parametrize(("name", "non_defaults"), EXPECTED_NON_DEFAULTS)
def test_per_pipeline_values_match_upstream(name, non_defaults):
    """Rule: each pipeline's non-default ModelDeploymentConfig fields (inheritance resolved)."""
    entry = load_deployment_configs().lookup(name)
    assert entry is not None
    assert entry.deployment.model_dump(exclude_defaults=True) == non_defaults


def test_deployment_defaults_match_upstream():
    """Rule: ModelDeploymentConfig defaults at bd3f6a793."""
    base = DeploymentConfig()
    assert base.auto_dit_layerwise_offload is False
    assert base.auto_dit_layerwise_offload_high_memory_disable_gb is None
    assert base.keep_resident_min_available_gb is None
    assert base.keep_resident_components == ("vae",)
    assert base.fsdp_auto_min_available_memory_gb is None
    assert base.fsdp_auto_requires_cfg is True
    assert base.fsdp_auto_requires_default_parallelism is True
    assert base.auto_enable_cfg_parallel is True
    assert base.auto_cfg_parallel_degree_by_num_gpus == ()


@pytest.mark.parametrize(("num_gpus", "degree"), [(2, 2), (4, 1), (8, 1), (16, 2)])
def test_auto_cfg_parallel_degree_lookup(num_gpus, degree):
    """Rule: get_auto_cfg_parallel_degree: table row for num_gpus, else 2."""
    ltx = load_deployment_configs().lookup("LTX2PipelineConfig")
    assert ltx is not None
    assert ltx.deployment.auto_cfg_parallel_degree(num_gpus) == degree


def test_family_facts_follow_upstream():
    """Rule: Wan family, A14B name rule, DMD models and default CFG use as upstream."""
    catalog = load_deployment_configs()
    for name, entry in catalog.pipelines.items():
        assert entry.family.is_wan2_2_a14b == is_wan2_2_a14b_name(name)
    wan = {name for name, entry in catalog.pipelines.items() if entry.family.is_wan_family}
    assert wan == set(PINNED_PIPELINE_CLASSES[:17])
    dmd = {name for name, entry in catalog.pipelines.items() if entry.family.dmd_distilled}
    assert dmd == {
        "TurboWanT2V480PConfig",
        "FastWan2_2_TI2V_5B_Config",
        "SelfForcingWanT2V480PConfig",
        "LongLive2T2VConfig",
        "TurboWanI2V720Config",
        "LingBotWorldCausalDMDConfig",
        "LingBotWorldV2CausalDMDConfig",
        "TurboWanT2V1_3B480PConfig",
        "FastWan2_1_T2V_480P_Config",
    }
    no_cfg = {name for name, e in catalog.pipelines.items() if e.family.uses_cfg is False}
    assert {"HunyuanConfig", "FastHunyuanConfig", "FluxPipelineConfig"} <= no_cfg
    assert "JoyEchoPipelineConfig" in no_cfg
    assert catalog.pipelines["Pi05PipelineConfig"].family.task_type == "VLA_ACTION"


#: Each class's ``task_type`` default upstream (configs/pipeline_configs/*.py at bd3f6a79,
#: inheritance resolved). Names do not decide it: LongLive2T2VConfig inherits
#: Wan2_2_TI2V_5B_Config and declares TI2V; JoyEcho overrides its LTX-2 parent's TI2V with T2V.
UPSTREAM_TASK_TYPES = {
    "WanT2V480PConfig": "T2V",
    "WanT2V720PConfig": "T2V",
    "TurboWanT2V480PConfig": "T2V",
    "Wan2_2_TI2V_5B_Config": "TI2V",
    "FastWan2_2_TI2V_5B_Config": "TI2V",
    "Wan2_2_T2V_A14B_Config": "T2V",
    "SelfForcingWanT2V480PConfig": "T2V",
    "LongLive2T2VConfig": "TI2V",
    "WanI2V480PConfig": "I2V",
    "WanI2V720PConfig": "I2V",
    "TurboWanI2V720Config": "I2V",
    "Wan2_2_I2V_A14B_Config": "I2V",
    "LingBotWorldI2VConfig": "I2V",
    "LingBotWorldCausalDMDConfig": "I2V",
    "LingBotWorldV2CausalDMDConfig": "I2V",
    "TurboWanT2V1_3B480PConfig": "T2V",
    "FastWan2_1_T2V_480P_Config": "T2V",
    "MOVAPipelineConfig": "I2V",
    "MOVA360PConfig": "I2V",
    "MOVA720PConfig": "I2V",
    "LTX2PipelineConfig": "TI2V",
    "LTX2I2VPipelineConfig": "TI2V",
    "LTX23PipelineConfig": "TI2V",
    "JoyEchoPipelineConfig": "T2V",
    "ZImagePipelineConfig": "T2I",
    "SanaWMPipelineConfig": "TI2V",
    "SanaWMRealtimeConfig": "TI2V",
    "FastHunyuanConfig": "T2V",
    "HunyuanConfig": "T2V",
    "Pi05PipelineConfig": "VLA_ACTION",
    "QwenImagePipelineConfig": "T2I",
    "QwenImageEditPipelineConfig": "I2I",
    "QwenImageEditPlusPipelineConfig": "I2I",
    "FluxPipelineConfig": "T2I",
    "Flux2PipelineConfig": "TI2I",
    "Flux2KleinPipelineConfig": "TI2I",
    "StableDiffusion3PipelineConfig": "T2I",
    "SanaPipelineConfig": "T2I",
    "GlmImagePipelineConfig": "TI2I",
    "Hunyuan3D2PipelineConfig": "I2M",
    "DiffusersGenericPipelineConfig": "T2I",
}


def test_task_types_are_the_class_defaults_upstream():
    """Rule: family.task_type is the config class's ``task_type`` default, for every class."""
    catalog = load_deployment_configs()
    assert {name: e.family.task_type for name, e in catalog.pipelines.items()} == UPSTREAM_TASK_TYPES


def test_pipeline_rules_use_the_class_task_type():
    """Rule: a rule's task is its class's (upstream reads pipeline_config.task_type).

    Only the diffusers-generic class differs: upstream swaps in its per-task
    subclass (e.g. DiffusersT2VPipelineConfig) for a video pipeline.
    """
    catalog = load_deployment_configs()
    mismatched = [
        (rule.repo_id or rule.class_name, rule.task_type)
        for rule in load_pipeline_rules().rules
        if rule.task_type != catalog.pipelines[rule.pipeline_config_class].family.task_type
    ]
    assert mismatched == [("LTXPipeline", "T2V")]


def test_unknown_class_without_task_type_names_the_field(make_request):
    """Rule: a task type neither given nor known for the class is a ValueError naming it."""
    with pytest.raises(ValueError, match=r"pipeline\.task_type: not given and not known"):
        tune(make_request("MyNewPipelineConfig"))


def test_loader_is_cached_per_directory():
    """Rule: loaded and validated once, lazily cached."""
    assert load_deployment_configs() is load_deployment_configs(REPO_CONFIGS)
    assert load_pipeline_rules() is load_pipeline_rules(REPO_CONFIGS)


def _write(tmp_path: Path, name: str, document: object) -> Path:
    (tmp_path / name).write_text(json.dumps(document), encoding="utf-8")
    return tmp_path


def test_loader_reads_explicit_directory(tmp_path, make_request):
    """Rule: a directory passed in explicitly replaces configs/."""
    directory = _write(
        tmp_path,
        "diffusion_deployments.json",
        {
            "source": "test",
            "pipelines": {
                "QwenImagePipelineConfig": {
                    "deployment": {"fsdp_auto_min_available_memory_gb": 10},
                    "family": {"uses_cfg": True, "task_type": "t2i"},
                }
            },
        },
    )
    result = tune(make_request(explicit={"num_gpus": 2}), config_dir=directory)
    assert result.use_fsdp_inference is True


@pytest.mark.parametrize(
    "document",
    [
        {"source": "x", "pipelines": {"A": {"deployment": {"no_such_field": 1}}}},
        {"source": "x", "pipelines": {"A": {"deployment": {"keep_resident_components": ["unet"]}}}},
        {"source": "x", "pipelines": {"Wan2_2_X_A14B": {"family": {"is_wan2_2_a14b": False}}}},
        {"source": "x", "pipelines": {"A": {"family": {"task_type": "T2X"}}}},
        {"pipelines": {}},
    ],
)
def test_loader_rejects_invalid_documents(tmp_path, document):
    """Rule: unknown keys, bad groups/tasks and a contradicted A14B fact are ValueErrors."""
    directory = _write(tmp_path, "diffusion_deployments.json", document)
    with pytest.raises(ValueError):
        load_deployment_configs(directory)


def test_loader_missing_file_is_value_error(tmp_path):
    """Rule: a missing data file is reported as a ValueError naming the path."""
    with pytest.raises(ValueError, match=r"diffusion_deployments\.json"):
        load_deployment_configs(tmp_path)


def test_unknown_pipeline_falls_back_to_base_config_with_log(run):
    """Rule: an unknown pipeline_config_class uses the base deployment config, logged."""
    result = run("MyNewPipelineConfig", pipeline={"task_type": "T2I"}, explicit={"num_gpus": 2})
    assert result.logs[0] == (
        "No deployment config for pipeline_config_class='MyNewPipelineConfig'; "
        "falling back to the base ModelDeploymentConfig defaults"
    )
    assert "model_default_uses_cfg (assumed, diffusers-generic default)" in result.logs[1]
    assert result.use_fsdp_inference is False
    assert result.enable_cfg_parallel is True


def test_unknown_pipeline_without_task_type_is_rejected(make_request):
    """Rule: the task type must come from the request when the class is unknown."""
    with pytest.raises(ValueError, match=r"pipeline\.task_type"):
        tune(make_request("MyNewPipelineConfig"))


def test_request_deployment_config_unknown_key_rejected(make_request):
    """Rule: a deployment_config dict is validated; unknown keys raise ValueError."""
    with pytest.raises(ValueError, match="fsdp_min"):
        tune(make_request(deployment={"fsdp_min": 3}))


def test_every_pipeline_rule_targets_a_known_config_class():
    """Rule: diffusion_pipelines.json only names classes present in the deployment data."""
    catalog = load_deployment_configs()
    rules = load_pipeline_rules().rules
    assert rules
    assert all(rule.pipeline_config_class in catalog.pipelines for rule in rules)
    kinds = ["repo" if rule.repo_id is not None else "class" for rule in rules]
    assert kinds == sorted(kinds, key=lambda kind: kind != "repo")


@pytest.mark.parametrize(
    "rules",
    [
        [
            {"class_name": "A", "pipeline_config_class": "X", "task_type": "T2I"},
            {"repo_id": "a/b", "pipeline_config_class": "X", "task_type": "T2I"},
        ],
        [{"repo_id": "a/b", "class_name": "A", "pipeline_config_class": "X", "task_type": "T2I"}],
        [{"pipeline_config_class": "X", "task_type": "T2I"}],
        [{"repo_id": "a/(b", "pipeline_config_class": "X", "task_type": "T2I"}],
        [{"repo_id": "a/b", "pipeline_config_class": "X", "task_type": "T2I", "extra": 1}],
    ],
)
def test_pipeline_rules_reject_invalid_documents(tmp_path, rules):
    """Rule: repo-id rules first, exactly one matcher, valid regex, no unknown keys."""
    directory = _write(tmp_path, "diffusion_pipelines.json", {"source": "t", "rules": rules})
    with pytest.raises(ValueError):
        load_pipeline_rules(directory)
