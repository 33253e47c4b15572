"""GPUStack rules pinned by decisions of GPUStack's own selector (commit 47277d79).

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
