"""Golden decisions of the strategy chain, each pinned to the GPUStack rule it exercises.

Numbers are derived by hand from the rules (claims are int(total × fraction);
messages use GPUStack's byte_to_gib rounding) and, where GPUStack's own tests
assert them, equal to those values (GPUStack
``tests/policies/candidate_selectors/sglang/test_sglang_resource_fit_selector.py``).
"""

from __future__ import annotations

import copy

from builders import (
    GIB,
    H100,
    MI300X,
    RTX_4080,
    RTX_4090,
    RTX_4090_SMALL,
    gpu,
    instance,
    model,
    request,
    uniform_worker,
    weight_for_estimate,
    worker,
)

from scheduler_core import schedule

QWEN_DEFAULT = (
    "- The model requires approximately 19.02 GiB of VRAM.\n"
    "- With --mem-fraction-static=0.848, all GPUs combined need to provide at least 22.43 GiB of "
    "total VRAM and each GPU needs 84% of allocatable VRAM."
)

DEEPSEEK_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "vocab_size": 129280,
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_rope_head_dim": 64,
}


def claims(result, position=None):
    chosen = result.candidates[result.selected if position is None else position]
    return {int(k): v for k, v in chosen.computed_resource_claim.vram.items()}


# ----------------------------------------------------------------------------- single GPU


def test_single_gpu_4080_claims_total_times_0772():
    """Rule: single GPU, auto tp1 on a 4080 → fraction 0.772, claim 13,256,383,004 (GPUStack test)."""
    small = model(weight_bytes=weight_for_estimate(10))
    result = schedule(request(small, [uniform_worker(1, "host4080", 1, RTX_4080)]))
    assert result.status == "scheduled"
    assert claims(result) == {0: 13_256_383_004}
    assert result.candidates[0].computed_resource_claim.vram_utilization == 0.772
    assert result.launch.backend_parameters == ["--mem-fraction-static", "0.772"]
    assert result.messages == []  # GPUStack only assembles messages on failure/overcommit


def test_single_gpu_every_fitting_gpu_is_a_candidate():
    """Rule: all fitting GPUs of all workers become candidates; the scorer picks one."""
    workers = [uniform_worker(1, "a", 2, RTX_4090), uniform_worker(2, "b", 1, RTX_4090)]
    result = schedule(request(model(), workers))
    assert [(c.worker_name, c.gpu_indexes) for c in result.candidates] == [("a", [0]), ("a", [1]), ("b", [0])]


def test_single_gpu_rejects_gpu_below_the_fraction_and_explains():
    """Rule: allocatable/total must reach the fraction; message names the largest free GPU and its %.

    4090 with 10 GiB claimed: 26,015,170,560 − 10 GiB = 14.23 GiB, 58.73 % < 84.8 %.
    """
    result = schedule(
        request(model(), [uniform_worker(1, "w", 1, RTX_4090)], [instance(1, 1, {0: 10 * GIB})])
    )
    assert result.status == "unschedulable"
    assert result.messages == [
        QWEN_DEFAULT + "\n- The current available GPU only has 14.23 GiB allocatable VRAM (58.73%)."
    ]
    assert result.state_message == (
        "No suitable workers.\nDetails:\n- Matched 1 worker by cluster selector.\n" + result.messages[0]
    )


def test_single_gpu_last_worker_event_wins():
    """Rule: only the last single-GPU event survives into the message (the last worker, not the best)."""
    workers = [uniform_worker(1, "big", 1, H100), uniform_worker(2, "small", 1, RTX_4080)]
    busy = [instance(1, 1, {0: 60 * GIB})]
    result = schedule(request(model(weight_bytes=weight_for_estimate(40)), workers, busy))
    assert result.messages[0].endswith(
        "- The current available GPU only has 15.99 GiB allocatable VRAM (100.00%)."
    )


def test_single_gpu_skips_worker_short_of_ram_for_extended_kv():
    """Rule: extended KV cache ram_size is a per-worker RAM requirement (ram_not_enough)."""
    kv = {"enabled": True, "ram_size": 64}
    workers = [uniform_worker(1, "tiny-ram", 1, RTX_4090, ram=32 * GIB), uniform_worker(2, "ok", 1, RTX_4090)]
    result = schedule(request(model(extended_kv_cache=kv), workers))
    assert [c.worker_name for c in result.candidates] == ["ok"]
    assert result.candidates[0].computed_resource_claim.ram == 64 * GIB
    assert result.events[0].message.startswith(
        "- The model requires approximately 19.02 GiB of VRAM and 64.0 GiB of RAM."
    )


def test_extended_kv_ram_ratio_claim():
    """Rule: without ram_size, RAM claim = int(Σ vram claim × ram_ratio) (GPUStack test: ratio 2.0)."""
    kv = {"enabled": True, "ram_ratio": 2.0}
    result = schedule(request(model(extended_kv_cache=kv), [uniform_worker(1, "w", 1, RTX_4090)]))
    assert claims(result) == {0: 22_060_864_634}
    assert result.candidates[0].computed_resource_claim.ram == 44_121_729_268


# ----------------------------------------------------------------------------- single worker, N GPUs


def test_message_for_largest_worker_matches_gpustack_example():
    """Rule: single-worker multi-GPU failure text.

    GPUStack's ``test_auto_schedule_single_work_multi_gpu`` example: 4×4080, 75.23 GiB model.
    """
    big = model(
        weight_bytes=weight_for_estimate(75.23), hf_config={"num_attention_heads": 40, "vocab_size": 152064}
    )
    result = schedule(request(big, [uniform_worker(1, "host4080", 4, RTX_4080)]))
    assert result.messages == [
        "- The model requires approximately 75.23 GiB of VRAM.\n"
        "- With --mem-fraction-static=0.772, all GPUs combined need to provide at least 97.45 GiB of "
        "total VRAM and each GPU needs 77% of allocatable VRAM.\n"
        "- The largest available worker has 63.97 GiB allocatable VRAM, 4/4 of GPUs meet the VRAM "
        "utilization ratio, providing 49.38 GiB of allocatable VRAM."
    ]


def test_pp_size_two_on_4080_claims_0765():
    """Rule: --pp-size 2 → world size 2, max_pp 2 → fraction 0.765, claim 13,136,182,640 (GPUStack test)."""
    result = schedule(
        request(model(backend_parameters=["--pp-size", "2"]), [uniform_worker(1, "w", 4, RTX_4080)])
    )
    assert result.status == "scheduled"
    assert claims(result) == {0: 13_136_182_640, 1: 13_136_182_640}
    assert result.launch.backend_parameters == ["--pp-size", "2", "--mem-fraction-static", "0.765"]


def test_greedy_prefix_skips_tp_sizes_that_do_not_divide_heads():
    """Rule: the walk only stops at TP-divisible counts: 28 heads, 3 GPUs would fit, 4 are taken."""
    result = schedule(
        request(model(weight_bytes=weight_for_estimate(50)), [uniform_worker(1, "w", 4, RTX_4090)])
    )
    assert claims(result) == dict.fromkeys(range(4), 22_060_864_634)
    assert result.launch.backend_parameters == ["--tp-size", "4", "--mem-fraction-static", "0.848"]


def test_tp_divisibility_message_for_largest_group():
    """Rule: when the largest satisfied group size does not divide the heads, that is the message."""
    result = schedule(
        request(model(weight_bytes=weight_for_estimate(50)), [uniform_worker(1, "w", 3, RTX_4090)])
    )
    assert result.messages[0].endswith(
        "- Total number of attention heads (28) must be divisible by tensor parallel size (3)."
    )
    assert result.events[-1].reason == "tp_not_divisible"


def test_first_memory_group_wins_and_groups_are_fixed_partitions():
    """Rule: 0.9 balance groups are a fixed partition from the smallest free GPU.

    H100s with 70/75/78/80 GiB free split into [70, 75] and [78, 80]; the
    smaller group is tried first and can hold the 100 GiB model (2 × int(H100 × 0.836)).
    """
    gpus = [gpu(i, H100) for i in range(4)]
    used = [instance(1, 1, {0: 10 * GIB, 1: 5 * GIB, 2: 2 * GIB})]
    result = schedule(request(model(weight_bytes=weight_for_estimate(100)), [worker(1, "w", gpus)], used))
    assert result.status == "scheduled"
    assert result.candidates[0].gpu_indexes == [1, 0]  # group [70, 75] walked by free memory, desc


def test_gpu_count_from_tp_size_stops_at_count():
    """Rule: with --tp-size the walk stops at that count; tp 2 enters the fraction (H100 → 0.834)."""
    result = schedule(request(model(backend_parameters=["--tp-size=2"]), [uniform_worker(1, "w", 4, H100)]))
    assert result.candidates[0].gpu_indexes == [0, 1]
    assert result.launch.backend_parameters == ["--tp-size=2", "--mem-fraction-static", "0.834"]


# ----------------------------------------------------------------------------- multi worker


def test_deepseek_two_nodes_of_h100_with_a_4090_in_the_cluster():
    """Rule: whole-node distributed candidate; fraction from the type's smallest GPU (a 24564 MiB 4090)
    → 0.847 and 72,756,745,994 per H100 (GPUStack test_auto_schedule_to_2_worker_16_gpu_deepseek_r1)."""
    workers = [
        uniform_worker(1, "h100-a", 8, H100),
        uniform_worker(2, "h100-b", 8, H100),
        uniform_worker(3, "host4090", 1, RTX_4090_SMALL),
    ]
    ds = model(name="deepseek-r1", hf_config=DEEPSEEK_CONFIG, weight_bytes=688_000_000_000)
    result = schedule(request(ds, workers))
    leader = result.candidates[0]
    assert (leader.worker_name, leader.gpu_indexes) == ("h100-a", list(range(8)))
    assert claims(result) == dict.fromkeys(range(8), 72_756_745_994)
    assert leader.computed_resource_claim.vram_utilization is None  # GPUStack: leader claim has none
    (follower,) = leader.subordinate_workers
    assert (follower.worker_name, follower.total_gpus, follower.gpu_type) == ("h100-b", 8, "cuda")
    assert follower.computed_resource_claim.vram_utilization == 0.847
    assert [n.backend_parameters[-6:] for n in result.launch.nodes] == [
        ["--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "192.168.50.1:29500"],
        ["--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "192.168.50.1:29500"],
    ]
    assert result.launch.backend_parameters[:6] == [
        "--tp-size",
        "8",
        "--pp-size",
        "2",
        "--mem-fraction-static",
        "0.847",
    ]


def test_multi_worker_failure_names_the_best_combination():
    """Rule: optimal-combination message + skipped-worker sentence + the fixed 'Cannot find' line."""
    workers = [uniform_worker(i, name, 2, H100) for i, name in ((1, "a"), (2, "b"), (3, "c"))]
    busy = [instance(1, 3, {0: 20 * GIB, 1: 20 * GIB})]
    result = schedule(request(model(weight_bytes=weight_for_estimate(300)), workers, busy))
    assert result.messages[0].split("\n")[2:] == [
        "- The optimal combination ['a', 'b'] provides 267.52 GiB of allocatable VRAM. There are 1 worker"
        " that can provide 2 GPUs, as the workers in the combination, but some GPUs among them fail to"
        " meet requirements.",
        "- Cannot find a suitable worker combination to run the model in distributed mode. If you are "
        "confident that the resources are sufficient, you may manually schedule the model by selecting "
        "the workers and GPUs.",
    ]


def test_multi_worker_lists_at_most_three_names():
    """Rule: worker names beyond three are summarised as '...(more n)'."""
    workers = [uniform_worker(i, f"n{i}", 1, RTX_4090) for i in range(1, 6)]
    result = schedule(request(model(weight_bytes=weight_for_estimate(500)), workers))
    assert "The optimal combination ['n1', 'n2', 'n3'...(more 2)] provides" in result.messages[0]


def test_multi_worker_skipped_without_distributed_inference():
    """Rule: distributed_inference_across_workers=False skips the multi-worker stage."""
    workers = [uniform_worker(1, "a", 8, H100), uniform_worker(2, "b", 8, H100)]
    ds = model(
        hf_config=DEEPSEEK_CONFIG, weight_bytes=688_000_000_000, distributed_inference_across_workers=False
    )
    result = schedule(request(ds, workers))
    assert result.status == "unschedulable"
    assert all(e.action != "auto_multi_worker_multi_gpu_scheduling_msg" for e in result.events)


# ----------------------------------------------------------------------------- manual selection


def test_manual_two_single_gpu_workers():
    """Rule: manual multi-worker; leader = first copy; fraction 0.842 from the smaller 4090 with
    max_pp = 2 selected workers (GPUStack test values 21,904,773,611 / 21,687,579,967)."""
    workers = [
        uniform_worker(1, "host4090", 1, RTX_4090),
        uniform_worker(2, "host-2-4090", 1, RTX_4090_SMALL),
    ]
    selected = model(gpu_selector={"gpu_ids": ["host4090:cuda:0", "host-2-4090:cuda:0"]})
    result = schedule(request(selected, workers))
    leader = result.candidates[0]
    assert (leader.worker_name, claims(result)) == ("host4090", {0: 21_904_773_611})
    assert leader.computed_resource_claim.vram_utilization is None
    assert leader.subordinate_workers[0].computed_resource_claim.vram == {"0": 21_687_579_967}


def test_manual_4090_plus_three_gpus_of_a_4080_box():
    """Rule: leader = worker with most selected GPUs; fraction 0.733 (tp 3, 2 workers) (GPUStack test)."""
    workers = [uniform_worker(1, "host4090", 1, RTX_4090), uniform_worker(2, "host4080", 4, RTX_4080)]
    ids = ["host4090:cuda:0", "host4080:cuda:0", "host4080:cuda:1", "host4080:cuda:2"]
    result = schedule(request(model(gpu_selector={"gpu_ids": ids}), workers))
    leader = result.candidates[0]
    assert (leader.worker_name, leader.gpu_indexes) == ("host4080", [0, 1, 2])
    assert claims(result) == dict.fromkeys((0, 1, 2), 12_586_695_262)
    assert leader.subordinate_workers[0].computed_resource_claim.vram == {"0": 19_069_120_020}
    assert result.launch.backend_parameters[:4] == ["--pp-size", "4", "--mem-fraction-static", "0.733"]


def test_manual_one_gpu_per_replica_makes_each_selected_gpu_a_candidate():
    """Rule: gpu_count 1 → every selected GPU is a candidate (non-overcommitted ones kept)."""
    selector = {"gpu_ids": ["w:cuda:0", "w:cuda:2"], "gpus_per_replica": 1}
    result = schedule(request(model(gpu_selector=selector), [uniform_worker(1, "w", 4, RTX_4090)]))
    assert [c.gpu_indexes for c in result.candidates] == [[0], [2]]
    assert result.filter_messages == [
        "Matched 1 worker by cluster selector.",
        "Matched 1 worker by gpu selector.",
    ]


def test_manual_overcommit_is_still_scheduled_with_a_message():
    """Rule: overcommit triage: the only candidate overcommits (0/1 GPUs meet 84.8 %), replicas 1 →
    deployed with overcommit=True and the overcommit message.

    4.23 GiB free of a 4090 (20 GiB claimed); providing int(free × 0.848) = 3.59 GiB. The sentences
    are GPUStack's (``base_candidate_selector.py``:
    ``ScheduleCandidatesSelector._generate_manual_selected_gpus_overcommit_message``).
    """
    selector = {"gpu_ids": ["w:cuda:0"], "gpus_per_replica": 1}
    busy = [instance(1, 1, {0: 20 * GIB})]
    result = schedule(request(model(gpu_selector=selector), [uniform_worker(1, "w", 1, RTX_4090)], busy))
    assert result.status == "scheduled"
    assert result.candidates[0].overcommit is True
    assert result.messages == [
        QWEN_DEFAULT + "\n- Manual GPU selection resulted in resource overcommit.\n"
        "- Selected GPUs have 4.23 GiB allocatable VRAM, 0/1 of GPUs meet the VRAM utilization ratio, "
        "providing 3.59 GiB of allocatable VRAM."
    ]


def test_manual_overcommit_refused_for_multiple_replicas():
    """Rule: multi-replica models never deploy an overcommitted manual candidate."""
    selector = {"gpu_ids": ["w:cuda:0"], "gpus_per_replica": 1}
    busy = [instance(1, 1, {0: 20 * GIB})]
    result = schedule(
        request(model(gpu_selector=selector, replicas=2), [uniform_worker(1, "w", 1, RTX_4090)], busy)
    )
    assert result.status == "unschedulable"
    assert result.messages[0].endswith(
        "- Found 1 candidate, manual scheduling for multi-replica model instances does not allow "
        "overcommit or heterogeneous deployment topologies."
    )


def test_manual_heterogeneous_types_rejected_by_event():
    """Rule: selecting two GPU types with gpus_per_replica = all selected is refused (ERROR event)."""
    mixed = worker(1, "mix", [gpu(0, MI300X, type_="rocm", vendor="amd"), gpu(0, RTX_4090)])
    selector = {"gpu_ids": ["mix:rocm:0", "mix:cuda:0"]}
    result = schedule(request(model(gpu_selector=selector), [mixed]))
    assert result.status == "unschedulable"
    assert result.events[-1].level == "error"
    assert result.messages[0].endswith(
        "- Deployment with heterogeneous GPU types is not supported, please select GPUs of the same "
        "type or update GPUs per replica."
    )


def test_manual_selection_skips_automatic_stages():
    """Rule: with a manual selection, only the manual stage runs."""
    selector = {"gpu_ids": ["w:cuda:0", "w:cuda:1"]}
    big = model(gpu_selector=selector, weight_bytes=weight_for_estimate(400))
    result = schedule(request(big, [uniform_worker(1, "w", 8, H100)]))
    assert result.candidates[0].overcommit is True
    assert result.candidates[0].gpu_indexes == [0, 1]


def test_manual_follower_already_running_a_distributed_instance():
    """Rule: a worker hosts one distributed instance at most; GPUStack's (vLLM-worded) message wins."""
    workers = [uniform_worker(1, "a", 1, H100), uniform_worker(2, "b", 1, H100)]
    running = instance(
        7,
        2,
        {0: GIB},
        subordinates=[{"worker_id": 3, "gpu_indexes": [0], "computed_resource_claim": {"vram": {"0": GIB}}}],
    )
    selector = {"gpu_ids": ["a:cuda:0", "b:cuda:0"]}
    result = schedule(request(model(gpu_selector=selector), workers, [running]))
    assert result.status == "unschedulable"
    assert result.messages == [
        "- Each worker can run only one distributed vLLM instance. Worker 'b' already has 'inst-7'."
    ]


# ----------------------------------------------------------------------------- mixed vendors


def test_mixed_cuda_rocm_worker_keeps_types_apart():
    """Rule: allocatable keyed by (type, index): a ROCm claim on index 0 never touches cuda:0, and the
    mixed worker's copies keep their own GPUs (GPUStack's shallow-copy bug is not reproduced)."""
    mixed = worker(1, "mix", [gpu(0, MI300X, type_="rocm", vendor="amd"), gpu(0, RTX_4090)])
    busy = [instance(1, 1, {0: 150 * GIB}, gpu_type="rocm")]
    req = request(model(placement_strategy="binpack"), [mixed], busy)
    before = copy.deepcopy(req)
    result = schedule(req)
    assert req == before  # the caller's input is never mutated
    assert result.estimate.mem_fraction_static == {"rocm": 0.867, "cuda": 0.848}
    (candidate,) = result.candidates
    assert (candidate.gpu_type, candidate.gpu_indexes) == ("cuda", [0])
    assert claims(result) == {0: 22_060_864_634}
    assert candidate.score == 2 * (22_060_864_634 / RTX_4090 * 100) / 3  # binpack on the cuda GPU
    assert (
        result.events[1].message
        == "- The current available GPU only has 41.98 GiB allocatable VRAM (21.87%)."
    )


# ----------------------------------------------------------------------------- diffusion


def test_diffusion_single_gpu_claims_the_weights():
    """Rule: IMAGE models claim their weights (×1, no overhead) and need only claim ≤ total."""
    image = model(categories=["image"], hf_config=None, weight_bytes=20 * GIB)
    result = schedule(request(image, [uniform_worker(1, "w", 1, RTX_4090)]))
    assert claims(result) == {0: 20 * GIB}
    assert result.candidates[0].computed_resource_claim.vram_utilization is None
    assert result.estimate.mem_fraction_static == {}
    assert result.events[0].message == "- The model requires approximately 20.0 GiB of VRAM."


def test_diffusion_too_large_for_each_gpu_explains_parallel_requirement():
    """Rule: SGLang Diffusion puts the whole model on every GPU; no multi-worker stage for IMAGE."""
    image = model(categories=["image"], hf_config=None, weight_bytes=30 * GIB)
    result = schedule(request(image, [uniform_worker(1, "w", 2, RTX_4090)]))
    assert result.status == "unschedulable"
    assert result.messages == [
        "- The model requires approximately 30.0 GiB of VRAM.\n"
        "- SGLang Diffusion requires each GPU to provide 30.0 GiB of allocatable VRAM when running "
        "in parallel."
    ]


# ----------------------------------------------------------------------------- remaining message templates


def test_multi_worker_plural_forms():
    """Rule: 'There are N workers that can provide G GPU' pluralises both nouns independently."""
    workers = [uniform_worker(i, name, 1, H100) for i, name in ((1, "a"), (2, "b"), (3, "c"), (4, "d"))]
    busy = [instance(1, 3, {0: 40 * GIB}), instance(2, 4, {0: 40 * GIB})]
    result = schedule(request(model(weight_bytes=weight_for_estimate(200)), workers, busy))
    assert (
        " There are 2 workers that can provide 1 GPU, as the workers in the combination, but some GPUs"
        " among them fail to meet requirements." in result.messages[0]
    )


def test_manual_overcommit_using_part_of_the_selection():
    """Rule: when the chosen overcommitted candidate uses fewer GPUs than selected, the message says
    which ones ('Using worker ... out of N selected devices.'); ties go to the later candidate.
    Two GPUs selected on one worker make select_tp 2: fraction 0.843, int(4.23 GiB × 0.843) = 3.56 GiB."""
    selector = {"gpu_ids": ["w:cuda:0", "w:cuda:1"], "gpus_per_replica": 1}
    busy = [instance(1, 1, {0: 20 * GIB, 1: 20 * GIB})]
    result = schedule(request(model(gpu_selector=selector), [uniform_worker(1, "w", 2, RTX_4090)], busy))
    assert result.candidates[0].gpu_indexes == [1]
    assert result.messages[0].split("\n")[2:] == [
        "- Manual GPU selection resulted in resource overcommit.",
        "- Using worker w GPU indexes [1] out of 2 selected devices.",
        "- Used GPUs provide 4.23 GiB allocatable VRAM, 0/1 of GPUs meet the VRAM utilization ratio, "
        "providing 3.56 GiB of allocatable VRAM.",
    ]


def _selection_without_fraction(workers, instances):
    """A decision state for a model without a fraction (GPUStack's non-LLM path, util 0)."""
    from scheduler_core._schemas import ModelInstance, ModelSpec, Worker
    from scheduler_core.arguments import TpRule
    from scheduler_core.caching import StageRunner
    from scheduler_core.cluster import ClusterState, group_workers_by_gpu_type
    from scheduler_core.mem_fraction import ManualSelection
    from scheduler_core.model_config import ModelParameters
    from scheduler_core.selection import Selection
    from scheduler_core.workers import worker_view

    views = [worker_view(Worker.model_validate(w)) for w in workers]
    cluster = ClusterState(views, [ModelInstance.model_validate(i) for i in instances])
    manual = ManualSelection(by_type={"cuda": {"w": [0, 1]}}, gpus_per_replica=None, active=True)
    selection = Selection(
        model=ModelSpec(name="m", categories=["embedding"]),
        categories=["embedding"],
        model_params=ModelParameters(),
        cluster=cluster,
        vram_claim=30 * GIB,
        ram_claim=0,
        mfs_by_type={"*": 0.0},
        gpu_count=2,
        manual=manual,
        selected_workers=("w",),
        tp_rule=TpRule.of(ModelParameters(), True),
        ordered=views,
        workers_by_type=group_workers_by_gpu_type(views),
        runner=StageRunner(cluster),
    )
    return selection, views


def test_overcommit_text_without_a_fraction():
    """Rule: non-LLM overcommit text (util 0, GPUStack's base selector): whole selection used →
    'Selected GPUs have X GiB of VRAM.'; part of it → 'Using ... out of N selected devices.' and
    'Used GPUs provide X GiB allocatable VRAM.' (GiB as byte_to_gib prints them, not .2f)."""
    from scheduler_core.candidates import Candidate, Claim
    from scheduler_core.strategies.manual import _Request, _triage

    selection, views = _selection_without_fraction([uniform_worker(1, "w", 2, RTX_4090)], [])
    claim = Claim(vram={0: 1, 1: 1}, ram=None, vram_utilization=0.0, estimated_vram=None)
    need = _Request(vram=30 * GIB, ram=0)
    _triage(selection, views, [Candidate(views[0], "cuda", (0, 1), claim)], need, total_selected=2)
    assert selection.log.events.events[-1].message == (
        "- Manual GPU selection resulted in resource overcommit.\n- Selected GPUs have 48.46 GiB of VRAM."
    )
    _triage(selection, views, [Candidate(views[0], "cuda", (1,), claim)], need, total_selected=2)
    assert selection.log.events.events[-1].message == (
        "- Manual GPU selection resulted in resource overcommit.\n"
        "- Using worker w GPU indexes [1] out of 2 selected devices.\n"
        "- Used GPUs provide 24.23 GiB allocatable VRAM."
    )


def test_overcommit_llm_text_has_two_decimals_and_untruncated_effective_vram():
    """Rule: the LLM overcommit line formats GiB with two decimals ('40.00') and the effective
    VRAM is allocatable × fraction. One 80 GiB H100 selected for a 200 GiB model at
    --mem-fraction-static 0.5: 80 × 0.5 = 40 GiB, printed '80.00' and '40.00'."""
    selector = {"gpu_ids": ["w:cuda:0"]}
    params = ["--mem-fraction-static", "0.5"]
    result = schedule(
        request(
            model(gpu_selector=selector, backend_parameters=params, weight_bytes=weight_for_estimate(200)),
            [uniform_worker(1, "w", 1, H100)],
        )
    )
    assert result.candidates[0].overcommit is True
    assert result.messages[0].split("\n")[2:] == [
        "- Manual GPU selection resulted in resource overcommit.",
        "- Selected GPUs have 80.00 GiB allocatable VRAM, 1/1 of GPUs meet the VRAM utilization ratio, "
        "providing 40.00 GiB of allocatable VRAM.",
    ]


def test_used_devices_abbreviate_beyond_eight_indexes_and_name_other_workers():
    """Rule: abbreviate_worker_gpu_indexes with GPUStack's limit 8 here: '[0, 1]' as Python prints a
    short list, '[0,1,...,7...(more 2)]' beyond 8; the other workers' GPUs are counted."""
    from scheduler_core.candidates import Candidate, Claim, Subordinate
    from scheduler_core.strategies.manual import _usage, _used_devices

    selection, views = _selection_without_fraction([uniform_worker(1, "w", 2, RTX_4090)], [])
    claim = Claim(vram={}, ram=None, vram_utilization=None, estimated_vram=None)
    leader = Candidate(views[0], "cuda", tuple(range(10)), claim)
    from scheduler_core.strategies.manual import _Selected

    nothing = _Selected(0, frozenset())
    assert _used_devices(leader, _usage(selection, leader, nothing)) == (
        "worker w GPU indexes [0,1,2,3,4,5,6,7...(more 2)]"
    )
    sub = Subordinate(views[0], "cuda", (0, 1, 2), claim)
    short = Candidate(views[0], "cuda", (0, 1), claim, subordinates=(sub,))
    assert _used_devices(short, _usage(selection, short, nothing)) == (
        "worker w GPU indexes [0, 1] and 3 GPUs from other 1 worker"
    )


def test_manual_selection_of_missing_gpus_adds_nothing():
    """Bad selection: GPU ids naming indexes a worker does not have never become phantom GPUs."""
    workers = [uniform_worker(1, "a", 2, H100), uniform_worker(2, "b", 1, H100)]
    ids = ["a:cuda:0", "a:cuda:1", "a:cuda:9", "b:cuda:0"]
    result = schedule(request(model(gpu_selector={"gpu_ids": ids}), workers))
    leader = result.candidates[0]
    assert leader.gpu_indexes == [0, 1]
    assert [(s.worker_name, s.gpu_indexes) for s in leader.subordinate_workers] == [("b", [0])]
    nothing = schedule(request(model(gpu_selector={"gpu_ids": ["a:cuda:7", "b:cuda:9"]}), workers))
    assert nothing.status == "unschedulable"


def test_spread_counts_instances_without_gpu_type():
    """Rule: spread counts every instance on a GPU index (GPUStack keys the counts by index)."""
    untyped = [instance(1, 1, {0: 10 * GIB}, gpu_type=None)]
    result = schedule(request(model(), [uniform_worker(1, "a", 2, H100)], untyped))
    assert [c.score for c in result.candidates] == [0.85 * 100 + 0.15 * 100 / 1.2, 100.0]
    assert result.candidates[result.selected].gpu_indexes == [1]


def test_zero_size_gpu_does_not_exclude_its_node_from_multi_worker():
    """gpusched: a GPU reporting no memory is skipped (GPUStack would divide by zero)."""
    a = worker(1, "a", [gpu(0, H100), gpu(1, 0)])
    b = worker(2, "b", [gpu(0, H100), gpu(1, 0)])
    result = schedule(request(model(weight_bytes=weight_for_estimate(100)), [a, b]))
    assert result.status == "scheduled"
    assert result.candidates[0].subordinate_workers[0].worker_name == "b"
