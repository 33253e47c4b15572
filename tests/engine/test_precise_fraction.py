"""SGLang 0.5.16's default fraction, reserve and KV cell, by hand (``tests/precise_oracle`` checks
the same against SGLang's own functions)."""

from __future__ import annotations

import pytest

from scheduler_core.precise.fraction import Device, ModelTraits, RuntimeFlags, prefill_capture_count, sizing
from scheduler_core.precise.kv import KvShape, kv_shape, kv_tokens

PLAIN = ModelTraits(mla=False, multimodal=False, vision_config=None, context_len=32768)
MLA = ModelTraits(mla=True, multimodal=False, vision_config=None, context_len=32768)


@pytest.mark.parametrize(("max_bs", "count"), [(2048, 42), (4096, 50), (8192, 58), (16384, 74)])
def test_prefill_capture_list_lengths(max_bs, count):
    """4..32/4 (8) + 48..256/16 (14) + 288..512/32 (8) + 576..1024/64 (8) = 38 sizes up to 1024;
    1280..2048/256 adds 4 (42), ..4096 adds 12 (50), 4608..8192/512 adds 8 (58), ..16384 adds 24 (74)."""
    assert prefill_capture_count(max_bs) == count


@pytest.mark.parametrize(
    ("mem", "tp", "traits", "reserve", "fraction"),
    [
        # 4090, tp 1: 512 + 2048×1.5 + 1/8×1024 = 3712; + decode 24×2 = 48; + prefill 42×8 = 336 → 4096
        (24564, 1, PLAIN, 4096, 0.833),
        # same GPU, MLA: the prefill graph is off on CUDA → 3712 + 48 = 3760 → (24564−3760)/24564 = 0.847
        (24564, 1, MLA, 3760, 0.847),
        # H100, tp 1: 512 + 8192×1.5 + 128 = 12928; + 256×2 + 58×8 = 976 → 13904 → 0.830
        (81559, 1, PLAIN, 13904, 0.830),
        # H100, tp 8: 512 + 12288 + 1024 = 13824; + 512×2 + 464 = 1488 → 15312 → 0.812
        (81559, 8, PLAIN, 15312, 0.812),
        # A100-40G, tp 8: 512 + 4096×1.5 + 1024 = 7680; + 160×2 + 50×8 = 720 → 8400 → 0.795
        (40960, 8, PLAIN, 8400, 0.795),
    ],
)
def test_current_reserve_and_fraction(mem, tp, traits, reserve, fraction):
    """The worked examples of upstream's current rules (research table, non-VLM, default flags)."""
    size = sizing(Device(mem, "cuda"), traits, RuntimeFlags(), tp, 1)
    assert size.reserve_mib == reserve
    assert size.launch == fraction
    assert size.factor == 1.0


def test_rocm_aiter_multiplies_even_a_user_fraction():
    """On ROCm with a context above 8,192 tokens SGLang multiplies any fraction by 0.85."""
    size = sizing(Device(196592, "rocm"), PLAIN, RuntimeFlags(user_fraction=0.8), 1, 1)
    assert size.launch == 0.8
    assert size.fraction == pytest.approx(0.68)


def test_deepep_adds_two_gib_after_the_floor_and_turns_the_prefill_graph_off():
    """H100 tp 8 with DeepEP: a MoE all-to-all backend turns the breakable prefill graph off
    (``_disable_breakable_cudagraph_if_incompatible``), so its 58 × 8 = 464 MiB go, and DeepEP adds
    2 GiB after the floor: 15312 − 464 + 2048 = 16896 → (81559 − 16896)/81559 = 0.793."""
    size = sizing(Device(81559, "cuda"), PLAIN, RuntimeFlags(moe_a2a_backend="deepep"), 8, 1)
    assert size.reserve_mib == 16896
    assert size.launch == 0.793


@pytest.mark.parametrize(
    "flags",
    [
        RuntimeFlags(lora=True),
        RuntimeFlags(attn_cp_size=2),
        RuntimeFlags(dcp_size=2),
        RuntimeFlags(moe_a2a_backend="mooncake"),
        RuntimeFlags(enable_dp_attention=True, dp_size=1),
        RuntimeFlags(prefill_graph_disabled=True),
    ],
)
def test_what_turns_the_prefill_graph_off_frees_its_reserve(flags):
    """H100 tp 1: LoRA, context parallel, decode context parallel, any MoE all-to-all backend and
    (in 0.5.16) DP attention turn the breakable prefill graph off: 13904 − 58 × 8 = 13440 MiB → 0.835
    (DP attention at dp 1 adds nothing more)."""
    size = sizing(Device(81559, "cuda"), PLAIN, flags, 1, 1)
    assert size.reserve_mib == 13440 + (256 * 1 * 3 if flags.enable_dp_attention else 0)


def test_an_explicit_prefill_backend_is_locked_and_context_length_clamps_the_capture_list():
    """``--cuda-graph-backend-prefill breakable`` keeps the graph for LoRA (the phase is locked);
    ``--context-length 1024`` cuts the capture list to 38 sizes (4..1024): 13440 + 38 × 8 = 13744."""
    locked = sizing(
        Device(81559, "cuda"), PLAIN, RuntimeFlags(lora=True, prefill_graph_backend="breakable"), 1, 1
    )
    assert locked.reserve_mib == 13904
    clamped = sizing(Device(81559, "cuda"), PLAIN, RuntimeFlags(context_length=1024), 1, 1)
    assert clamped.reserve_mib == 13440 + 38 * 8


def test_llama_8b_cell_and_tokens():
    """Llama-3.1-8B bf16: 8 KV heads × (128+128) × 32 layers × 2 B = 131,072 B per token at tp 1;
    tp 2 halves the heads (65,536 B); a 1 GiB budget holds 8,192 tokens at tp 1."""
    config = {
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
    }
    shape = kv_shape(config, "auto", "bfloat16")
    assert shape is not None
    assert shape.cell_bytes(1, 32) == 131_072
    assert shape.cell_bytes(2, 32) == 65_536
    assert shape.cell_bytes(1, 16) == 65_536  # pp 2: 16 layers on a rank
    assert kv_tokens(1 << 30, shape.cell_bytes(1, 32), 1) == 8192
    assert kv_tokens(1 << 30, shape.cell_bytes(1, 32), 3000) == 6000  # whole pages only


def test_deepseek_v3_mla_cell_is_replicated_and_fp8_halves_it():
    """DeepSeek-V3: (512 + 64) × 61 × 2 B = 70,272 B per token whatever the tp; FP8 KV: 35,136 B."""
    config = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "num_hidden_layers": 61,
        "hidden_size": 7168,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
    }
    archs = ("DeepseekV3ForCausalLM",)
    shape = kv_shape(config, "auto", "bfloat16", archs)
    assert shape is not None and shape.is_mla
    assert shape.cell_bytes(1, 61) == shape.cell_bytes(8, 61) == 70_272
    fp8 = kv_shape(config, "fp8_e4m3", "bfloat16", archs)
    assert fp8 is not None and fp8.cell_bytes(8, 61) == 35_136
    # MLA is SGLang's choice by architecture: the same sizes under another name are MHA
    assert not kv_shape(config, "auto", "bfloat16", ("SomethingForCausalLM",)).is_mla


def test_kv_heads_default_to_attention_heads_and_never_below_one():
    """No KV-head key: every head is a KV head (MHA); tp above the KV heads keeps one head per rank."""
    shape = KvShape(layers=2, kv_heads=4, head_dim=64, v_head_dim=64, mla_width=0, element="bfloat16")
    assert shape.cell_bytes(8, 2) == 1 * 128 * 2 * 2
    mha = kv_shape({"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4}, "auto", "bfloat16")
    assert mha is not None and mha.kv_heads == 4
