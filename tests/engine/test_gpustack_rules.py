"""GPUStack rules pinned by decisions of GPUStack's own selector (GPUStack 2.2.3 from PyPI,
byte-identical to commit 47277d79 on this path).

Each expected value was checked against GPUStack's code (the parity oracle) and
is derived by hand in the test's docstring.
"""

from __future__ import annotations

from builders import GIB, H100, RTX_4090, gpu, model, request, weight_for_estimate, worker

from scheduler_core import schedule

G44 = 44 * GIB


def _busy(instance_id: int, worker_id: int, indexes: list[int], gib: int) -> dict[str, object]:
    claim = {str(i): gib * GIB for i in indexes}
    return {
        "id": instance_id,
        "name": f"busy-{instance_id}",
        "model_id": 99,
        "worker_id": worker_id,
        "gpu_type": "cuda",
        "gpu_indexes": indexes,
        "computed_resource_claim": {"vram": claim},
    }


def test_one_element_parameter_is_tokenised_before_reading_tp():
    """Rule 1 (flatten_to_argv): ["--tp-size 2"] means tp 2. Two 44 GiB GPUs (45,056 MiB, tier
    < 60 GiB: chunk 4096, graph bs 32): reserve 512 + 6144 + 64 + 2/8 × 1024 = 6,976 MiB →
    fraction round(38,080 / 45,056, 3) = 0.845, one candidate on both GPUs (1 GPU would be 0.848)."""
    row = model(weight_bytes=weight_for_estimate(12), backend_parameters=["--tp-size 2"])
    result = schedule(request(row, [worker(1, "w", [gpu(0, G44), gpu(1, G44)])]))
    assert [c.gpu_indexes for c in result.candidates] == [[0, 1]]
    claim = result.candidates[0].computed_resource_claim
    assert claim.vram_utilization == 0.845
    assert claim.vram == {"0": int(G44 * 0.845), "1": int(G44 * 0.845)}
    assert result.launch is not None
    assert result.launch.backend_parameters[:2] == ["--tp-size", "2"]  # the argv SGLang receives


def test_null_backend_is_placed_as_sglang():
    """Rule 2: model.backend null is accepted (GPUStack's schema allows it) and placed as SGLang."""
    result = schedule(request(model(backend=None), [worker(1, "w", [gpu(0, RTX_4090)])]))
    assert result.status == "scheduled"
    assert result.candidates[0].computed_resource_claim.vram_utilization == 0.848


def test_gpus_per_replica_zero_means_unset():
    """Rule 3 (_set_gpu_count: gpus_per_replica or len(gpu_ids)): 0 → the 2 selected GPUs make one
    replica; tp guess 2 on a 4090 gives 0.843 (reserve 512 + 3072 + 48 + 256 = 3,888 of 24,810 MiB)."""
    selector = {"gpu_ids": ["w:cuda:0", "w:cuda:1"], "gpus_per_replica": 0}
    result = schedule(
        request(model(gpu_selector=selector), [worker(1, "w", [gpu(0, RTX_4090), gpu(1, RTX_4090)])])
    )
    assert [c.gpu_indexes for c in result.candidates] == [[0, 1]]
    assert result.candidates[0].computed_resource_claim.vram_utilization == 0.843


def test_multi_worker_gate_has_no_tp_check():
    """Rule 4: two 8×H100 nodes with GPUs 0-2 holding 10 GiB each: free memory groups are 6 × 70 GiB
    and 10 × 80 GiB (5 per node; 70 < 0.9 × 80). GPUStack's gate only needs equal counts per node,
    then tp is checked per whole-node bucket (8 divides 64 heads): one candidate over both nodes at
    fraction 0.836 (reserve max(512 + 12288 + 512 + 128, 10240) = 13,440 of 81,920 MiB)."""
    llama_70b = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "hidden_size": 8192,
        "num_hidden_layers": 80,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
    }
    row = model(name="llama-70b", hf_config=llama_70b, weight_bytes=weight_for_estimate(700))
    nodes = [worker(i, f"n{i}", [gpu(j, H100) for j in range(8)]) for i in (1, 2)]
    result = schedule(request(row, nodes, [_busy(10 + i, i, [0, 1, 2], 10) for i in (1, 2)]))
    assert result.status == "scheduled"
    (candidate,) = result.candidates
    assert (candidate.worker_id, candidate.gpu_indexes) == (1, list(range(8)))
    followers = [(s.worker_id, s.gpu_indexes) for s in candidate.subordinate_workers or []]
    assert followers == [(2, list(range(8)))]
    assert candidate.computed_resource_claim.vram == {str(i): int(H100 * 0.836) for i in range(8)}


def test_constructor_error_gets_the_no_suitable_workers_header():
    """Rule 8: an error of the selector's constructor is find_candidate's only message, stored under
    GPUStack's 'No suitable workers.' header; the filters ran first and keep their lines."""
    row = model(backend_parameters=['--tp-size "2'])
    result = schedule(request(row, [worker(1, "w", [gpu(0, RTX_4090)])]))
    assert result.status == "rejected"
    line = "Failed to initialize SGLang candidates selector: No closing quotation"
    assert result.messages == [line]
    assert result.state_message == "No suitable workers.\nDetails:\n" + line
    assert result.filter_messages == ["Matched 1 worker by cluster selector."]
    assert result.error is not None
    assert (result.error.field, result.error.message) == ("model.backend_parameters", "No closing quotation")


def test_selection_error_is_stored_as_failed_to_find_candidate():
    """Rule 8: an argument error raised while selecting propagates out of find_candidate and is
    stored as 'Failed to find candidate: ...' (no header, no messages)."""
    result = schedule(request(model(backend_parameters=["--tp-size=3"]), [worker(1, "w", [gpu(0, H100)])]))
    assert result.status == "rejected"
    assert result.messages == []
    assert result.state_message == (
        "Failed to find candidate: Total number of attention heads (28) must be divisible by tp-size (3)."
    )


QWEN2_VL_7B = {
    "architectures": ["Qwen2VLForConditionalGeneration"],
    "model_type": "qwen2_vl",
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "hidden_size": 3584,
    "num_hidden_layers": 28,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "vision_config": {"depth": 32, "embed_dim": 1280, "num_heads": 16, "hidden_size": 3584},
}


def test_local_path_config_read_from_workers_is_a_plain_dict():
    """Rule: GPUStack reads a local-path model's config.json from the workers as a plain
    PretrainedConfig (calculator.py: get_pretrained_config_with_workers), so the ViT counts as
    ViT-L/14: on an H100 the fraction is round(0.836 × 0.95, 3) = 0.794. The same config from a hub
    is parsed by its class (depth 32, hidden 3584: ratio 16.33, adjustment clamped to 0.8):
    round(0.836 × 0.95 × 0.8, 3) = 0.635. A folder this process cannot read is not an error when
    the request carries the config; the weights then count as GPUStack's unknown size."""
    hub = model(hf_config=QWEN2_VL_7B, huggingface_repo_id="Qwen/Qwen2-VL-7B-Instruct")
    local = model(hf_config=QWEN2_VL_7B, local_path="/models/on/the/workers", weight_bytes=None)
    node = [worker(1, "w", [gpu(0, H100)])]
    from_hub = schedule(request(hub, node))
    from_workers = schedule(request(local, node))
    assert from_hub.estimate is not None and from_workers.estimate is not None
    assert from_hub.estimate.mem_fraction_static == {"cuda": 0.635}
    assert from_workers.estimate.mem_fraction_static == {"cuda": 0.794}
    assert (from_workers.status, from_workers.estimate.weight_source) == ("scheduled", "unknown")


def test_unknown_weight_size_keeps_gpustacks_number_and_says_it_is_a_guess():
    """Rule: without weight_bytes (or a readable folder) GPUStack counts the weights as 0, so the
    estimate is its 2 GiB overhead; gpusched keeps that number under policy gpustack but warns, in
    ``warnings`` and as a warning event, and GPUStack's own messages stay untouched."""
    from scheduler_core.messages import UNKNOWN_WEIGHT_SIZE

    unknown = schedule(request(model(weight_bytes=None), [worker(1, "w", [gpu(0, H100)])]))
    assert unknown.estimate is not None
    assert (unknown.estimate.vram_bytes, unknown.estimate.weight_source) == (2 * GIB, "unknown")
    assert unknown.warnings == [UNKNOWN_WEIGHT_SIZE]
    assert (unknown.events[0].level, unknown.events[0].reason) == ("warning", "weight_size_unknown")
    known = schedule(request(model(), [worker(1, "w", [gpu(0, H100)])]))
    assert known.warnings == [] and all(e.level != "warning" for e in known.events)
    override = model(weight_bytes=None, env={"GPUSTACK_MODEL_VRAM_CLAIM": str(9 * GIB)})
    assert schedule(request(override, [worker(1, "w", [gpu(0, H100)])])).warnings == []
