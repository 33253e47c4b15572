"""GPUStack's ModelParameters from config.json dicts (scheduler_core.model_config)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from builders import LLAMA_3_8B
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core.model_config import ModelConfigError, ModelParameters, model_parameters_from_config

# --------------------------------------------------------------------------- helpers


def params(config: dict[str, Any] | None) -> ModelParameters:
    return model_parameters_from_config(config, is_llm=True)




# --------------------------------------------------------------------------- plain LLMs


def test_none_config_gives_defaults_for_any_category() -> None:
    assert model_parameters_from_config(None, is_llm=True) == ModelParameters()
    assert model_parameters_from_config(None, is_llm=False) == ModelParameters()


def test_empty_config_gets_default_max_len_and_mqa_kv_heads() -> None:
    assert params({}) == ModelParameters(derived_max_seq_len=2048)


def test_plain_llm_fields_and_derived_head_dim() -> None:
    assert params(LLAMA_3_8B) == ModelParameters(
        architectures=("LlamaForCausalLM",),
        derived_max_seq_len=8192,
        num_hidden_layers=32,
        hidden_size=4096,
        vocab_size=128256,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        torch_dtype="bfloat16",
    )


def test_explicit_head_dim_wins_over_derivation() -> None:
    gemma = {"hidden_size": 3072, "num_attention_heads": 16, "head_dim": 256}

    assert params(gemma).head_dim == 256


def test_missing_kv_heads_defaults_to_one_like_gpustack() -> None:
    assert params({"num_attention_heads": 16}).num_key_value_heads == 1


def test_integral_floats_are_accepted_as_ints() -> None:
    result = params({"num_attention_heads": 32.0, "max_position_embeddings": 4096.0})

    assert result.num_attention_heads == 32
    assert result.derived_max_seq_len == 4096


def test_dtype_key_of_transformers_v5_is_read() -> None:
    assert params({"dtype": "float16"}).torch_dtype == "float16"
    assert params({"torch_dtype": None}).torch_dtype == "bfloat16"


def test_quantization_config_is_a_read_only_copy() -> None:
    config = {"quantization_config": {"quant_method": "awq", "bits": 4}}

    quant = params(config).quantization_config

    assert quant == {"quant_method": "awq", "bits": 4}
    with pytest.raises(TypeError):
        quant["bits"] = 8  # type: ignore[index]


def test_input_is_never_mutated_and_results_share_nothing() -> None:
    config = {
        **LLAMA_3_8B,
        "vision_config": {"depth": 32, "num_heads": 16, "extra": {"nested": [1]}},
        "quantization_config": {"quant_method": "fp8"},
        "text_config": {"num_attention_heads": 8},
    }
    snapshot = copy.deepcopy(config)

    result = params(config)
    assert config == snapshot

    config["vision_config"]["extra"]["nested"].append(2)
    config["quantization_config"]["quant_method"] = "awq"
    assert result.vision_config is not None
    assert result.vision_config["extra"] == {"nested": [1]}
    assert result.quantization_config == {"quant_method": "fp8"}


def test_parameters_are_hashable_even_with_mapping_fields() -> None:
    result = params({"vision_config": {"num_heads": 16}, "quantization_config": {"bits": 4}})

    assert hash(result) == hash(params({"vision_config": {"num_heads": 16}}))
    assert result != params({"vision_config": {"num_heads": 16}})


# --------------------------------------------------------------------------- multimodal


def test_qwen2_vl_style_vision_config_with_text_fields_at_root() -> None:
    qwen2_vl = {
        "architectures": ["Qwen2VLForConditionalGeneration"],
        "model_type": "qwen2_vl",
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "max_position_embeddings": 32768,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "vocab_size": 152064,
        "vision_config": {"depth": 32, "embed_dim": 1280, "num_heads": 16, "hidden_size": 3584},
    }

    result = params(qwen2_vl)

    assert result.is_multimodel
    assert result.vision_num_attention_heads == 16
    assert result.vision_config == qwen2_vl["vision_config"]
    assert result.num_attention_heads == 28
    assert result.derived_max_seq_len == 32768
    assert result.architectures == ("Qwen2VLForConditionalGeneration",)


def test_vision_sizes_unread_without_model_type() -> None:
    """Rule: without ``model_type`` GPUStack's fallback keeps ``vision_config`` a plain dict that its
    ``getattr`` reads as empty (the ViT counts as ViT-L/14); the vision heads are still read."""
    config = {
        "architectures": ["Qwen2VLForConditionalGeneration"],
        "num_attention_heads": 28,
        "vision_config": {"depth": 32, "embed_dim": 1280, "num_heads": 16, "hidden_size": 3584},
    }
    result = params(config)
    assert result.is_multimodel
    assert result.vision_config is not None and dict(result.vision_config) == {}
    assert result.vision_num_attention_heads == 16


def test_llava_style_text_config_is_the_text_side() -> None:
    llava = {
        "architectures": ["LlavaForConditionalGeneration"],
        "text_config": {
            "architectures": ["MistralForCausalLM"],
            "hidden_size": 5120,
            "num_attention_heads": 32,
            "num_hidden_layers": 40,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "max_position_embeddings": 1024000,
            "vocab_size": 131072,
            "torch_dtype": None,
        },
        "vision_config": {"num_attention_heads": 16, "num_hidden_layers": 24},
        "torch_dtype": "float16",
    }

    result = params(llava)

    assert result.architectures == ("LlavaForConditionalGeneration",)
    assert (result.num_attention_heads, result.hidden_size, result.head_dim) == (32, 5120, 128)
    assert result.derived_max_seq_len == 1024000
    assert result.torch_dtype == "float16"
    assert result.vision_num_attention_heads == 16


def test_text_config_without_heads_falls_back_to_root() -> None:
    config = {"text_config": {"model_type": "llama", "hidden_size": 1}, "hidden_size": 4096}

    assert params(config).hidden_size == 4096


def test_internvl_llm_config_and_dummy_vision_heads() -> None:
    internvl = {
        "architectures": ["InternVLChatModel"],
        "llm_config": {
            "architectures": ["InternLM2ForCausalLM"],
            "hidden_size": 6144,
            "num_attention_heads": 48,
            "num_hidden_layers": 48,
            "num_key_value_heads": 8,
            "max_position_embeddings": 32768,
            "vocab_size": 92553,
        },
        "vision_config": {"num_attention_heads": 25, "num_dummy_heads": 7, "hidden_size": 3200},
    }

    result = params(internvl)

    assert result.architectures == ("InternVLChatModel",)
    assert result.num_attention_heads == 48
    assert result.head_dim == 128
    assert result.vision_num_attention_heads == 32


def test_architectures_fall_back_to_text_config_when_root_has_none() -> None:
    config = {"text_config": {"num_attention_heads": 8, "architectures": ["GemmaForCausalLM"]}}

    assert params(config).architectures == ("GemmaForCausalLM",)


def test_language_config_is_a_text_side_candidate() -> None:
    deepseek_vl2 = {"language_config": {"num_attention_heads": 10, "hidden_size": 1280}}

    assert params(deepseek_vl2).head_dim == 128


def test_qwen_omni_thinker_text_config_and_root_only_vision() -> None:
    qwen_omni = {
        "architectures": ["Qwen2_5OmniModel"],
        "thinker_config": {
            "text_config": {"num_attention_heads": 28, "hidden_size": 3584, "vocab_size": 152064},
            "vision_config": {"num_heads": 16},
        },
    }

    result = params(qwen_omni)

    assert result.num_attention_heads == 28
    assert result.vocab_size == 152064
    assert not result.is_multimodel  # GPUStack reads vision_config from the root only


def test_text_config_wins_over_llm_config_for_selection() -> None:
    config = {"text_config": {"num_attention_heads": 8}, "llm_config": {"num_attention_heads": 4}}

    assert params(config).num_attention_heads == 8


def test_head_fallback_order_prefers_llm_config_then_root() -> None:
    both = {
        "text_config": {"num_attention_heads": 0},
        "llm_config": {"num_attention_heads": 24},
        "num_attention_heads": 32,
    }
    root_only = {"text_config": {"num_attention_heads": 0}, "num_attention_heads": 32}

    assert params(both).num_attention_heads == 24
    assert params(root_only).num_attention_heads == 32
    assert params({"num_attention_heads": 0}).num_attention_heads is None


@pytest.mark.parametrize(
    ("vision_config", "heads"),
    [
        ({"num_attention_heads": 16, "num_heads": 12}, 16),
        ({"num_attention_heads": 0, "num_heads": 12}, 12),
        ({"num_heads": 12, "num_dummy_heads": -3}, 12),
        ({"num_heads": 12, "num_dummy_heads": None}, 12),
        ({"num_heads": 0}, None),
        ({"depth": 32}, None),
        ({}, None),
    ],
)
def test_vision_heads(vision_config: dict[str, Any], heads: int | None) -> None:
    result = params({"vision_config": vision_config})

    assert result.is_multimodel
    assert result.vision_num_attention_heads == heads


def test_null_vision_config_is_not_multimodal() -> None:
    assert not params({"vision_config": None}).is_multimodel


def test_vision_config_is_read_only() -> None:
    vision = params({"vision_config": {"depth": 32}}).vision_config

    with pytest.raises(TypeError):
        vision["depth"] = 1  # type: ignore[index]


# --------------------------------------------------------------------------- MoE / MLA


def test_deepseek_v3_mla_and_moe_fields() -> None:
    deepseek_v3 = {
        "hidden_size": 7168,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "n_group": 8,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "moe_intermediate_size": 2048,
        "max_position_embeddings": 163840,
        "rope_scaling": {
            "type": "yarn",
            "factor": 40,
            "original_max_position_embeddings": 4096,
        },
    }

    result = params(deepseek_v3)

    assert (result.q_lora_rank, result.kv_lora_rank) == (1536, 512)
    assert (result.qk_rope_head_dim, result.qk_nope_head_dim, result.v_head_dim) == (64, 128, 128)
    assert (result.n_group, result.moe_num_experts, result.moe_num_shared_experts) == (8, 256, 1)
    assert result.moe_intermediate_size == 2048
    assert result.derived_max_seq_len == 163840


@pytest.mark.parametrize(
    ("config", "experts", "shared"),
    [
        ({"num_local_experts": 8}, 8, None),
        ({"num_experts": 128, "num_shared_experts": 2}, 128, 2),
        ({"n_routed_experts": 64, "num_experts": 128}, 64, None),
        ({"moe_num_experts": [64, 64], "moe_num_shared_experts": 2}, 64, 2),
        ({}, None, None),
    ],
    ids=["mixtral", "qwen-moe", "alias-order", "ernie-vl-list", "dense"],
)
def test_moe_expert_aliases(config: dict[str, Any], experts: int | None, shared: int | None) -> None:
    result = params(config)

    assert (result.moe_num_experts, result.moe_num_shared_experts) == (experts, shared)


def test_per_modality_moe_intermediate_size_takes_text_entry() -> None:
    assert params({"moe_intermediate_size": [3584, 1536]}).moe_intermediate_size == 3584


# --------------------------------------------------------------------------- max seq len


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"max_position_embeddings": 4096, "seq_length": 2048}, 2048),
        ({"n_positions": 1024, "max_seq_len": 4096}, 1024),
        ({"model_max_length": 512, "max_target_positions": 448}, 448),
        ({"max_sequence_length": 8192, "max_seq_length": 16384, "seq_len": 32768}, 8192),
        ({}, 2048),
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, 4096),
        ({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 4}}, 16384),
        ({"max_position_embeddings": 4096, "rope_scaling": {"type": "dynamic", "factor": 2}}, 8192),
        (
            {
                "max_position_embeddings": 40960,
                "rope_scaling": {
                    "rope_type": "yarn",
                    "factor": 4.0,
                    "original_max_position_embeddings": 32768,
                },
            },
            131072,
        ),
        ({"max_position_embeddings": 32768, "rope_scaling": {"type": "yarn", "factor": 2}}, 65536),
        (
            {
                "max_position_embeddings": 131072,
                "rope_scaling": {
                    "rope_type": "llama3",
                    "factor": 8.0,
                    "original_max_position_embeddings": 8192,
                },
            },
            131072,
        ),
        ({"max_position_embeddings": 131072, "rope_scaling": {"type": "su", "factor": 4}}, 131072),
        ({"max_position_embeddings": 131072, "rope_scaling": {"type": "longrope"}}, 131072),
        ({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "default"}}, 4096),
        ({"max_position_embeddings": 4096, "rope_scaling": {"factor": 1.5}}, 6144),
        (
            {
                "max_position_embeddings": 4096,
                "rope_parameters": {"rope_type": "linear", "factor": 2},
            },
            8192,
        ),
    ],
    ids=[
        "min-of-keys",
        "n_positions",
        "whisper-style",
        "later-keys",
        "default",
        "linear-on-default",
        "linear",
        "dynamic",
        "yarn",
        "yarn-without-original",
        "llama3-unscaled",
        "su-unscaled",
        "longrope-unscaled",
        "default-type-no-factor",
        "typeless-factor",
        "v5-rope-parameters",
    ],
)
def test_derived_max_seq_len(config: dict[str, Any], expected: int) -> None:
    assert params(config).derived_max_seq_len == expected


def test_max_seq_len_comes_from_the_text_config() -> None:
    config = {
        "max_position_embeddings": 1024,
        "text_config": {"num_attention_heads": 8, "max_position_embeddings": 65536},
    }

    assert params(config).derived_max_seq_len == 65536


# --------------------------------------------------------------------------- config errors


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"num_attention_heads": "abc"}, "hf_config.num_attention_heads"),
        ({"num_attention_heads": True}, "hf_config.num_attention_heads"),
        ({"hidden_size": 1.5}, "hf_config.hidden_size"),
        ({"num_key_value_heads": [8, 8]}, "hf_config.num_key_value_heads"),
        (
            {"text_config": {"num_attention_heads": "x"}},
            "hf_config.text_config.num_attention_heads",
        ),
        ({"text_config": "llama"}, "hf_config.text_config"),
        ({"thinker_config": [1]}, "hf_config.thinker_config"),
        ({"thinker_config": {"text_config": 3}}, "hf_config.thinker_config.text_config"),
        ({"vision_config": "siglip"}, "hf_config.vision_config"),
        ({"vision_config": {"num_heads": "16"}}, "hf_config.vision_config.num_heads"),
        (
            {"vision_config": {"num_heads": 16, "num_dummy_heads": "7"}},
            "hf_config.vision_config.num_dummy_heads",
        ),
        ({"architectures": "LlamaForCausalLM"}, "hf_config.architectures"),
        ({"architectures": [1]}, "hf_config.architectures"),
        ({"torch_dtype": 16}, "hf_config.torch_dtype"),
        ({"quantize": 4}, "hf_config.quantize"),
        ({"quantization_config": ["awq"]}, "hf_config.quantization_config"),
        ({"rope_scaling": "yarn"}, "hf_config.rope_scaling"),
        ({"rope_scaling": {"type": "linear", "factor": "2"}}, "hf_config.rope_scaling.factor"),
        ({"rope_scaling": {"type": "linear", "factor": 0}}, "hf_config.rope_scaling.factor"),
        ({"rope_scaling": {"type": 7}}, "hf_config.rope_scaling.type"),
        ({"max_position_embeddings": 0}, "hf_config.max_position_embeddings"),
        ({"seq_length": -1}, "hf_config.seq_length"),
        ({"seq_len": float("inf")}, "hf_config.seq_len"),
        ({"n_positions": float("nan")}, "hf_config.n_positions"),
        ({"max_seq_len": "4k"}, "hf_config.max_seq_len"),
        ({"moe_num_experts": ["64"]}, "hf_config.moe_num_experts[0]"),
        ({"num_experts": "many"}, "hf_config.num_experts"),
    ],
)
def test_wrong_types_raise_naming_the_field(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ModelConfigError) as caught:
        params(config)

    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")
    assert isinstance(caught.value, ValueError)


def test_config_that_is_not_an_object_is_rejected() -> None:
    with pytest.raises(ModelConfigError) as caught:
        model_parameters_from_config([1, 2], is_llm=False)  # type: ignore[arg-type]

    assert caught.value.field == "hf_config"


def test_long_values_are_excerpted_in_messages() -> None:
    with pytest.raises(ModelConfigError) as caught:
        params({"hidden_size": "x" * 500})

    assert len(caught.value.message) < 100


_json_leaf = st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats() | st.text(max_size=4)
_config_keys = st.sampled_from(
    [
        "num_attention_heads",
        "hidden_size",
        "head_dim",
        "vision_config",
        "text_config",
        "llm_config",
        "thinker_config",
        "rope_scaling",
        "type",
        "factor",
        "max_position_embeddings",
        "original_max_position_embeddings",
        "num_heads",
        "num_dummy_heads",
        "architectures",
        "torch_dtype",
        "num_experts",
        "moe_intermediate_size",
    ]
)
_json_values = st.recursive(
    _json_leaf,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_config_keys, children),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(config=st.dictionaries(_config_keys, _json_values))
def test_property_parses_or_names_a_field_and_never_mutates(config: dict[str, Any]) -> None:
    snapshot = repr(config)

    try:
        result = params(config)
    except ModelConfigError as exc:
        assert exc.field.startswith("hf_config")
    else:
        assert result.derived_max_seq_len is not None
        assert result.num_attention_heads is None or result.num_attention_heads > 0
    assert repr(config) == snapshot


