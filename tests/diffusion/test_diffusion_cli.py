"""CLI flags <-> ServerArgs fields: ``diffusion_args_from_cli`` and ``tuned_cli_flags``."""

from __future__ import annotations

import pytest

from scheduler_core.diffusion import diffusion_args_from_cli, tune, tuned_cli_flags


def test_parses_equals_space_and_bare_forms():
    """Rule: --k=v, --k v and bare --k (True) all parse."""
    parsed = diffusion_args_from_cli(
        [
            "--tp-size=2",
            "--sp-degree",
            "4",
            "--enable-cfg-parallel",
            "--use-fsdp-inference",
            "false",
            "--performance-mode",
            "SPEED",
        ]
    )
    assert parsed == {
        "tp_size": 2,
        "sp_degree": 4,
        "enable_cfg_parallel": True,
        "use_fsdp_inference": False,
        "performance_mode": "SPEED",
    }


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        *[("true", True), ("TRUE", True), ("1", True), ("Yes", True)],
        *[("false", False), ("0", False), ("no", False), ("NO", False)],
    ],
)
def test_boolean_literals(literal, value):
    """Rule: booleans accept true/false/1/0/yes/no in any case, in both value forms."""
    assert diffusion_args_from_cli(["--dit-cpu-offload", literal]) == {"dit_cpu_offload": value}
    assert diffusion_args_from_cli([f"--vae-cpu-offload={literal}"]) == {"vae_cpu_offload": value}


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (["--mode", "memory"], {"performance_mode": "memory"}),
        (["--cfg-parallel-size", "2"], {"cfg_parallel_degree": 2}),
        (["--cfg-parallel-degree=1"], {"cfg_parallel_degree": 1}),
        (["--layerwise-offload-modules", "vae"], {"layerwise_offload_components": ["vae"]}),
    ],
)
def test_aliases_map_to_field_names(tokens, expected):
    """Rule: --mode, --cfg-parallel-size and --layerwise-offload-modules are aliases."""
    assert diffusion_args_from_cli(tokens) == expected


@pytest.mark.parametrize(
    "tokens",
    [
        ["--layerwise-offload-components", "text_encoder,vae"],
        ["--layerwise-offload-components=text_encoder,vae"],
        ["--layerwise-offload-components", "text_encoder", "vae", "--tp-size", "1"],
    ],
)
def test_layerwise_components_take_commas_or_several_tokens(tokens):
    """Rule: the component list accepts commas and/or several value tokens."""
    parsed = diffusion_args_from_cli(tokens)
    assert parsed["layerwise_offload_components"] == ["text_encoder", "vae"]


def test_every_listed_flag_is_recognised():
    """Rule: each flag the tuner reads maps to its ServerArgs field."""
    parsed = diffusion_args_from_cli(
        [
            "--performance-mode=auto",
            "--num-gpus=4",
            "--tp-size=1",
            "--sp-degree=2",
            "--ulysses-degree=2",
            "--ring-degree=1",
            "--enable-cfg-parallel=true",
            "--cfg-parallel-degree=2",
            "--use-fsdp-inference=true",
            "--dit-cpu-offload=false",
            "--dit-layerwise-offload=false",
            "--layerwise-offload-components=vae",
            "--dit-offload-prefetch-size=0.5",
            "--text-encoder-cpu-offload=true",
            "--image-encoder-cpu-offload=false",
            "--vae-cpu-offload=false",
            "--enable-torch-compile=true",
            "--ltx2-two-stage-device-mode=resident",
        ]
    )
    assert parsed == {
        "performance_mode": "auto",
        "num_gpus": 4,
        "tp_size": 1,
        "sp_degree": 2,
        "ulysses_degree": 2,
        "ring_degree": 1,
        "enable_cfg_parallel": True,
        "cfg_parallel_degree": 2,
        "use_fsdp_inference": True,
        "dit_cpu_offload": False,
        "dit_layerwise_offload": False,
        "layerwise_offload_components": ["vae"],
        "dit_offload_prefetch_size": 0.5,
        "text_encoder_cpu_offload": True,
        "image_encoder_cpu_offload": False,
        "vae_cpu_offload": False,
        "enable_torch_compile": True,
        "ltx2_two_stage_device_mode": "resident",
    }


def test_unknown_flags_and_their_values_are_ignored():
    """Rule: flags outside the list are ignored (and stray tokens with them)."""
    parsed = diffusion_args_from_cli(
        ["--model-path", "Qwen/Qwen-Image", "--tp-size", "2", "--trust-remote-code", "-x"]
    )
    assert parsed == {"tp_size": 2}


def test_bare_boolean_leaves_non_boolean_token_alone():
    """Rule: a bare boolean followed by a non-boolean token is True; the token is not its value."""
    assert diffusion_args_from_cli(["--enable-torch-compile", "stray"]) == {"enable_torch_compile": True}


def test_last_occurrence_wins_and_underscores_count_as_dashes():
    """Rule: repeated flags -> last wins (argparse); --tp_size == --tp-size."""
    assert diffusion_args_from_cli(["--tp-size=2", "--tp_size", "4"]) == {"tp_size": 4}


@pytest.mark.parametrize(
    ("tokens", "flag"),
    [
        (["--tp-size", "abc"], "--tp-size"),
        (["--num-gpus=2.5"], "--num-gpus"),
        (["--enable-torch-compile=maybe"], "--enable-torch-compile"),
        (["--dit-offload-prefetch-size", "nan"], "--dit-offload-prefetch-size"),
        (["--dit-offload-prefetch-size", "fast"], "--dit-offload-prefetch-size"),
        (["--num-gpus"], "--num-gpus"),
        (["--performance-mode", "--tp-size", "1"], "--performance-mode"),
        (["--layerwise-offload-components=,"], "--layerwise-offload-components"),
        (["--ltx2-two-stage-device-mode", "foo"], "--ltx2-two-stage-device-mode"),
    ],
)
def test_bad_values_raise_value_error_naming_the_flag(tokens, flag):
    """Rule: a value that does not parse is a ValueError naming the flag."""
    with pytest.raises(ValueError, match=flag):
        diffusion_args_from_cli(tokens)


def test_choice_flags_take_argparse_choices_as_given():
    """Rule: --ltx2-two-stage-device-mode has argparse choices original/resident/snapshot (case-sensitive)."""
    assert diffusion_args_from_cli(["--ltx2-two-stage-device-mode", "snapshot"]) == {
        "ltx2_two_stage_device_mode": "snapshot"
    }
    with pytest.raises(ValueError) as raised:
        diffusion_args_from_cli(["--ltx2-two-stage-device-mode=Resident"])
    assert str(raised.value) == (
        "--ltx2-two-stage-device-mode: invalid choice 'Resident' "
        "(choose from 'original', 'resident', 'snapshot')"
    )


def test_cli_args_feed_tune_as_explicit_args(make_request):
    """Rule: parsed names are ServerArgs fields, usable as explicit_args directly."""
    explicit = diffusion_args_from_cli(["--num-gpus", "2", "--enable-torch-compile", "false"])
    result = tune(make_request(explicit=explicit))
    assert result.explicit_args == ["enable_torch_compile", "num_gpus"]


# --- tuned_cli_flags ------------------------------------------------------------------------


def test_tuned_flags_for_auto_z_image_two_gpus(run):
    """Rule: every tuned, non-explicit, non-None value as a --flag value pair, fixed order."""
    result = run("ZImagePipelineConfig", explicit={"num_gpus": 2})
    assert tuned_cli_flags(result, set(result.explicit_args)) == [
        "--enable-torch-compile", "false",
        "--use-fsdp-inference", "true",
        "--dit-cpu-offload", "false",
        "--dit-layerwise-offload", "false",
        "--layerwise-offload-components", "text_encoder,image_encoder",
        "--dit-offload-prefetch-size", "0",
        "--text-encoder-cpu-offload", "false",
        "--image-encoder-cpu-offload", "false",
        "--vae-cpu-offload", "false",
        "--enable-cfg-parallel", "true",
        "--cfg-parallel-size", "2",  # SGLang's CLI name for cfg_parallel_degree
        "--tp-size", "1",
        "--sp-degree", "1",
        "--ulysses-degree", "1",
        "--ring-degree", "1",
    ]  # fmt: skip


def test_tuned_flags_skip_explicit_fields(run):
    """Rule: fields the user set explicitly are not repeated."""
    result = run(explicit={"tp_size": 1, "vae_cpu_offload": False})
    flags = tuned_cli_flags(result, {"tp_size", "vae_cpu_offload"})
    assert "--tp-size" not in flags
    assert "--vae-cpu-offload" not in flags
    assert "--sp-degree" in flags


def test_tuned_flags_skip_unset_values(run):
    """Rule: None (manual mode leaves flags unset) has no CLI spelling and is skipped."""
    result = run(explicit={"performance_mode": "manual"})
    flags = tuned_cli_flags(result, set(result.explicit_args))
    assert "--use-fsdp-inference" not in flags
    assert "--layerwise-offload-components" not in flags
    assert "--performance-mode" not in flags
    assert flags[:2] == ["--enable-torch-compile", "false"]


@pytest.mark.parametrize(("prefetch", "rendered"), [(2.0, "2"), (0.5, "0.5")])
def test_tuned_flags_render_floats(run, prefetch, rendered):
    """Rule: whole floats print as integers, others as is."""
    result = run(explicit={"dit_offload_prefetch_size": prefetch})
    flags = tuned_cli_flags(result, set())
    index = flags.index("--dit-offload-prefetch-size")
    assert flags[index + 1] == rendered


def test_tuned_flags_include_ltx2_mode(run):
    """Rule: the LTX-2.3 device mode is rendered when set."""
    result = run(
        "LTX23PipelineConfig",
        pipeline={"is_ltx23_two_stage_pipeline": True},
        device_name="NVIDIA H200",
    )
    flags = tuned_cli_flags(result, set())
    assert flags[-2:] == ["--ltx2-two-stage-device-mode", "resident"]


def test_tuned_flags_round_trip_through_the_parser(run):
    """Rule: parsing the rendered flags gives back the tuned values."""
    result = run("Wan2_2_T2V_A14B_Config", explicit={"num_gpus": 2})
    parsed = diffusion_args_from_cli(tuned_cli_flags(result, set()))
    assert parsed
    for name, value in parsed.items():
        assert getattr(result, name) == value
