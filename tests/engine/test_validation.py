"""Bad input is rejected with the field named; GPUStack's argument errors keep their exact text."""

from __future__ import annotations

import pytest
from builders import RTX_4090, model, request, uniform_worker

from scheduler_core import schedule

PP_CONFLICT = (
    "Pipeline parallelism is not compatible with overlap schedule, speculative decoding, "
    "mixed chunked prefill."
)
QWEN_VL_CONFIG = {
    "architectures": ["Qwen2VLForConditionalGeneration"],
    "num_attention_heads": 28,
    "vocab_size": 152064,
    "vision_config": {"depth": 32, "hidden_size": 3584, "num_heads": 16},
}


def rejected(params=(), **model_overrides):
    result = schedule(
        request(
            model(backend_parameters=list(params), **model_overrides), [uniform_worker(1, "w", 8, RTX_4090)]
        )
    )
    assert result.status == "rejected", result
    assert result.candidates == [] and result.launch is None
    return result.error


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (["--tp-size", "3"], "Total number of attention heads (28) must be divisible by tp-size (3)."),
        (["--tp-size", "4", "--nnodes", "3"], "tp-size 4 must be divisible by nnodes"),
        (
            ["--pp-size", "2", "--speculative-algorithm", "EAGLE"],
            PP_CONFLICT,
        ),
        (
            ["--pp-size", "2", "--enable-mixed-chunk", "true"],
            PP_CONFLICT,
        ),
        (
            ["--tp-size", "2", "--dp-size", "2", "--nnodes", "2"],
            "multi-node data parallel is not supported unless dp attention!",
        ),
        (
            ["--speculative-algorithm", "EAGLE", "--enable-mixed-chunk=1"],
            "enable_mixed_chunk is required for speculative decoding",
        ),
        (["--tp-size", "0"], "--tp-size must be a positive integer."),
        (["--tp-size 3"], "Total number of attention heads (28) must be divisible by tp-size (3)."),
        (["--mem-fraction-static", "lots"], "could not convert string to float: 'lots'"),
        (["--nnodes", "two"], "invalid literal for int() with base 10: 'two'"),
    ],
)
def test_argument_errors_keep_gpustack_text(params, message):
    """Rule: _validate_and_set_arguments errors, verbatim; always naming model.backend_parameters."""
    error = rejected(params)
    assert (error.field, error.message) == ("model.backend_parameters", message)


def test_bare_mixed_chunk_is_false_so_pp_is_allowed():
    """Rule: GPUStack reads --enable-mixed-chunk with strtobool: a bare flag is False (no error)."""
    result = schedule(
        request(
            model(backend_parameters=["--pp-size", "2", "--enable-mixed-chunk"]),
            [uniform_worker(1, "w", 2, RTX_4090)],
        )
    )
    assert result.status == "scheduled"


def test_dp_attention_allows_multi_node_dp():
    """Rule: --enable-dp-attention lifts the multi-node dp restriction and drops dp from the world size."""
    params = ["--tp-size", "2", "--dp-size", "2", "--nnodes", "2", "--enable-dp-attention"]
    result = schedule(request(model(backend_parameters=params), [uniform_worker(1, "w", 2, RTX_4090)]))
    assert result.status == "scheduled"
    assert len(result.candidates[0].gpu_indexes) == 2


def test_vision_heads_then_vocab_divisibility():
    """Rule: TP divisibility checks heads, then vision heads (unless --language-only), then vocab."""
    error = rejected(["--tp-size", "7"], hf_config=QWEN_VL_CONFIG)
    assert error.message == (
        "Total number of vision attention heads (16) must be divisible by tensor parallel size (7). "
        "Consider adjusting your tp-size value."
    )
    error = rejected(["--tp-size", "7", "--language-only"], hf_config=QWEN_VL_CONFIG)
    assert error.message == (
        "Vocabulary size (152064) must be divisible by tensor parallel size (7). "
        "Consider adjusting your tp-size value."
    )


def test_manual_count_must_match_world_size_unless_env_skips():
    """Rule: _set_gpu_count; GPUSTACK_SKIP_GPU_COUNT_CHECK keeps the manual count instead."""
    selector = {"gpu_ids": ["w:cuda:0", "w:cuda:1"]}
    error = rejected(["--tp-size", "4"], gpu_selector=selector)
    assert error.message == (
        "Model qwen2.5-7b has tp set, but the selected gpu count (2) does not match the world size (4). "
        "Adjust the selected GPUs or the parallelism backend parameters so they match. "
        "If the mismatch is intentional, add GPUSTACK_SKIP_GPU_COUNT_CHECK=1 to the model's environment "
        "variables to bypass this check and keep the selected gpu count."
    )
    assert error.code == "gpu_count_mismatch"
    skipped = model(
        backend_parameters=["--tp-size", "4"],
        gpu_selector=selector,
        env={"GPUSTACK_SKIP_GPU_COUNT_CHECK": "Yes"},
    )
    result = schedule(request(skipped, [uniform_worker(1, "w", 8, RTX_4090)]))
    assert result.status == "scheduled"
    assert result.candidates[0].gpu_indexes == [0, 1]


@pytest.mark.parametrize(
    ("selector", "field"),
    [
        ({"gpu_ids": ["w-cuda-0"]}, "model.gpu_selector.gpu_ids.0"),
        ({"gpu_ids": ["w:cuda:0", "w:cuda:0"]}, "model.gpu_selector.gpu_ids.1"),
        ({"gpu_ids": ["w:cuda:0"], "gpus_per_replica": -1}, "model.gpu_selector.gpus_per_replica"),
    ],
)
def test_bad_gpu_selector(selector, field):
    """Bad input: malformed, duplicated or negative manual selection."""
    assert rejected(gpu_selector=selector).field == field


def test_user_fraction_applies_to_every_type_and_is_not_injected():
    """Rule: --mem-fraction-static replaces the calculator for every type; the user's flag is kept."""
    result = schedule(
        request(
            model(backend_parameters=["--mem-fraction-static", "0.8"]), [uniform_worker(1, "w", 1, RTX_4090)]
        )
    )
    assert result.estimate.mem_fraction_static == {"cuda": 0.8}
    assert result.candidates[0].computed_resource_claim.vram == {"0": int(RTX_4090 * 0.8)}
    assert result.launch.backend_parameters == ["--mem-fraction-static", "0.8"]


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r.pop("workers"), "workers"),
        (
            lambda r: r["workers"][0]["status"]["gpu_devices"][0]["memory"].update(total="lots"),
            "workers.0.status.gpu_devices.0.memory.total",
        ),
        (lambda r: r["workers"][0].update(state="sleeping"), "workers.0.state"),
        (lambda r: r["model"].update(backend="vLLM"), "model.backend"),
        (lambda r: r["model"].update(categories=["chat"]), "model.categories"),
        (lambda r: r.update(policy="fastest"), "policy"),
        (lambda r: r["workers"].append(dict(r["workers"][0])), "workers.1"),
        (
            lambda r: r["model"]["hf_config"].update(num_attention_heads="many"),
            "model.hf_config.num_attention_heads",
        ),
        (lambda r: r["model"].update(local_path="/nonexistent/model", hf_config=None), "model.local_path"),
        (lambda r: r["model_instances"].append({"worker_id": "x"}), "model_instances.0.worker_id"),
    ],
)
def test_invalid_requests_name_the_field(mutate, field):
    """Invariant 4: bad input never crashes; it is rejected with the field named."""
    req = request(model(), [uniform_worker(1, "w", 1, RTX_4090)])
    mutate(req)
    result = schedule(req)
    assert result.status == "rejected"
    assert result.error.field == field
    assert result.error.code != "internal_error"
    assert "\n" not in result.error.message


def test_non_object_request_is_rejected():
    """Bad input: not a JSON object at all."""
    for value in (None, [], "text", 3):
        result = schedule(value)
        assert (result.status, result.error.field) == ("rejected", "request")
        assert result.request_id.startswith("req-")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (["--mem-fraction-static", "0"], "--mem-fraction-static must be greater than 0."),
        (["--enable-mixed-chunk", "maybe", "--nnodes", "3"], "invalid truth value 'maybe'"),
    ],
)
def test_fraction_flags_and_validation_order(params, message):
    """Rule: the calculator's flags are validated with the others, in upstream's order
    (mixed-chunk is parsed before the nnodes check)."""
    error = rejected(params)
    assert (error.field, error.message) == ("model.backend_parameters", message)


def test_piecewise_max_tokens_read_only_with_piecewise_value():
    """Rule: upstream reads --piecewise-cuda-graph-max-tokens only when the piecewise flag has a value."""
    result = schedule(
        request(
            model(backend_parameters=["--piecewise-cuda-graph-max-tokens", "x"]),
            [uniform_worker(1, "w", 1, RTX_4090)],
        )
    )
    assert result.status == "scheduled"


def test_rejected_result_carries_gpustack_state_message():
    """Rule: GPUStack prefixes selector errors with 'Failed to find candidate: ' in its state message."""
    result = schedule(
        request(model(backend_parameters=["--tp-size", "3"]), [uniform_worker(1, "w", 4, RTX_4090)])
    )
    assert result.state_message == (
        "Failed to find candidate: Total number of attention heads (28) must be divisible by tp-size (3)."
    )


def test_two_gpus_with_one_identity_are_rejected():
    """Bad input: (type, index) identifies a GPU on a worker."""
    from builders import gpu, worker

    twin = worker(1, "w", [gpu(0, RTX_4090), gpu(0, RTX_4090)])
    result = schedule(request(model(), [twin]))
    assert (result.status, result.error.field) == ("rejected", "workers.0.status.gpu_devices.1")
