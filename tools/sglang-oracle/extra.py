"""More of SGLang's own start-up code, executed on CPU: what ``oracle.py`` leaves out.

``oracle.py`` (the kit, unchanged) runs SGLang's fraction, cell and pool functions. The
tests of ``policy: precise`` and ``bench/bench_policies.py`` also need SGLang's answer to
these questions, each answered here by the upstream function itself, extracted from the
unpacked ``sglang/srt`` with :mod:`ast` the way ``oracle.py`` does and run next to stubs:

==========================================  =================================================
call                                        SGLang code it executes (sglang 0.5.16)
==========================================  =================================================
:func:`server_args`                         ``ServerArgs._parse_cuda_graph_config``,
                                            ``_apply_cuda_graph_compatibility`` (with both
                                            ``_disable_*_cudagraph_if_incompatible``),
                                            ``_apply_cuda_graph_disaggregation_roles``,
                                            ``_handle_gpu_memory_settings`` and its helpers,
                                            ``adjust_mem_fraction_for_vlm``; the
                                            ``CudaGraphConfig`` defaults of
                                            ``model_executor/cuda_graph_config.py``
:func:`model_config`                        ``ModelConfig._derive_model_shapes``,
                                            ``_derive_context_length`` (+ ``get_context_length``),
                                            ``_get_and_verify_dtype``, the multimodal and
                                            CUDA-graph architecture lists, ``is_hybrid_swa_model``
:func:`kv_cache_dtype`                      ``configure_kv_cache_dtype`` and the
                                            ``--kv-cache-dtype`` choices of ``ServerArgs``
:func:`cell`                                ``DefaultPoolConfigurator._compute_cell_size``
:func:`pp_layers`                           ``distributed/utils.py: get_pp_indices``
:func:`tp_balance`                          ``distributed/bootstrap.py: _check_tp_memory_balance``
:func:`start`                               the above, then ``oracle.upstream_tokens``
                                            (``_profile_available_bytes``, ``calculate_pool_sizes``)
                                            on every rank, the minimum over ranks as
                                            ``_apply_token_constraints`` takes it
==========================================  =================================================

Only the boundary is stubbed: ``torch`` dtypes are strings, the platform queries answer
for the GPU kind asked about, environment variables come from the caller's mapping (the
model's ``env``), and the free memory SGLang measures is the caller's figure. Nothing of
SGLang is copied into this file; ``setup.sh`` unpacks it from PyPI.
"""

from __future__ import annotations

import ast
import logging
import math
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import oracle  # the kit's module, beside this file

SRT = oracle.SRT
GIB = 1 << 30
log = logging.getLogger("up")
log.disabled = True  # SGLang's warnings (graph backends turned off, FP4 accuracy) are not test output


def available() -> bool:
    """Whether SGLang's sources are unpacked where ``oracle.py`` looks (``setup.sh`` does it)."""
    return (SRT / "server_args.py").is_file()


# --------------------------------------------------------------------------- extraction


def _tree(path: str) -> ast.Module:
    return ast.parse((SRT / path).read_text())


def _top_level(path: str, names: Sequence[str]) -> list[str]:
    """Source of the module-level functions, classes and assignments named, in file order."""
    found = []
    for node in _tree(path).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in names:
            if isinstance(node, ast.FunctionDef):
                node.decorator_list = []  # caches; a class keeps its @dataclass
            found.append((node.name, ast.unparse(node)))
        elif isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if targets and targets[0] in names:
                found.append((targets[0], ast.unparse(node)))
    missing = set(names) - {name for name, _ in found}
    assert not missing, f"{path}: {missing}"
    return [source for _, source in found]


def _run(sources: Sequence[str], namespace: dict[str, Any]) -> dict[str, Any]:
    for source in sources:
        exec("from __future__ import annotations\n" + source, namespace)
    return namespace


def _replace(source: str, old: str, new: str) -> str:
    """A textual patch of an extracted function; the pattern must be there (upstream changed?)."""
    assert old in source, f"pattern not found: {old!r}"
    return source.replace(old, new)


def _insert_before(source: str, line: str, new: str) -> str:
    """``new`` as a statement just before the (unique) line ``line``, at its indentation."""
    lines = source.split("\n")
    found = [i for i, text in enumerate(lines) if text.strip() == line]
    assert len(found) == 1, f"pattern not found once: {line!r}"
    indent = lines[found[0]][: len(lines[found[0]]) - len(lines[found[0]].lstrip())]
    lines.insert(found[0], indent + new)
    return "\n".join(lines)


# --------------------------------------------------------------------------- stubs


class DType(str):
    """A ``torch.dtype`` stand-in: its name."""


TORCH = types.SimpleNamespace(
    dtype=DType,
    float16=DType("fp16"),
    bfloat16=DType("bf16"),
    float32=DType("fp32"),
    float8_e4m3fn=DType("fp8_e4m3"),
    float8_e4m3fnuz=DType("fp8_e4m3"),
    float8_e5m2=DType("fp8_e5m2"),
    float4_e2m1fn_x2=DType("fp4"),
    _utils=oracle._TorchUtils,
)
# Element sizes the pool reads (``torch._utils._element_size``); fp4 packs two per byte
# (``float4_e2m1fn_x2`` is one byte holding two values).
oracle.ELEM.update({"fp32": 4, "fp4": 1})


class Env:
    """``envs.X.get()`` for the variables a model's ``env`` sets, parsed by SGLang's ``EnvBool``."""

    def __init__(self, values: Mapping[str, str], defaults: Mapping[str, bool]) -> None:
        self._values = values
        self._defaults = defaults

    def __getattr__(self, name: str) -> Any:
        default = self._defaults.get(name, False)
        raw = self._values.get(name)

        def get() -> bool:
            if raw is None:
                return default
            try:
                return bool(_ENV_BOOL.parse(_ENV_BOOL, raw))
            except ValueError:  # EnvField.get: an invalid value warns and keeps the default
                return default

        return types.SimpleNamespace(get=get, is_set=lambda: raw is not None)


_ENV_NS = _run(_top_level("environ.py", ["EnvBool"]), {"EnvField": object})
_ENV_BOOL = _ENV_NS["EnvBool"]
#: Defaults of the variables read here (``environ.py``).
_ENV_DEFAULTS = {
    "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK": True,
    "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": False,
}


# --------------------------------------------------------------------------- model config

_MC_LISTS = [
    "MIMO_V2_MODEL_ARCHS",
    "MIMO_V2_MULTIMODAL_ARCHS",
    "multimodal_model_archs",
    "piecewise_cuda_graph_disabled_model_archs",
    "multimodal_piecewise_cuda_graph_supported_model_archs",
    "multimodal_breakable_cuda_graph_supported_model_archs",
    "_STR_DTYPE_TO_TORCH_DTYPE",
]
_MC_FUNCTIONS = ["is_multimodal_model", "is_hybrid_swa_model", "_get_and_verify_dtype"]
_MC = _run(
    _top_level("configs/model_config.py", _MC_LISTS + _MC_FUNCTIONS),
    {"torch": TORCH, "logger": log, "List": list, "Optional": object, "envs": None},
)
_CTX = _run(
    _top_level("utils/hf_transformers/common.py", ["CONTEXT_LENGTH_KEYS", "get_context_length"]),
    {"lru_cache_frozenset": lambda **_: lambda f: f},
)
_MC_METHODS = oracle._extract(
    "configs/model_config.py", "ModelConfig", ["_derive_model_shapes", "_derive_context_length"]
)
_AttentionArch = types.SimpleNamespace(MLA="MLA", MHA="MHA")
_MODEL_NS: dict[str, Any] = {
    "AttentionArch": _AttentionArch,
    "math": math,
    "logger": log,
    "get_context_length": _CTX["get_context_length"],
    "is_in_ci": lambda: False,
    "is_deepseek_dsa": lambda config: False,
    "get_dsa_index_head_dim": lambda config: None,
    "compute_mla_mscale_scaling": lambda rope, scaling: scaling,
    "_hf_arch": lambda config: config.architectures[0],
}
_run(list(_MC_METHODS.values()), _MODEL_NS)


class HfConfig(types.SimpleNamespace):
    """A config.json as transformers exposes it: keys as attributes; the optional keys
    SGLang reads with plain attribute access default to None, as ``PretrainedConfig`` has them."""

    _OPTIONAL = ("rope_scaling", "head_dim", "v_head_dim", "model_type")

    def __getattr__(self, name: str) -> Any:
        if name in HfConfig._OPTIONAL:
            return None
        raise AttributeError(name)


def _namespace(value: Any) -> Any:
    if isinstance(value, Mapping):
        return HfConfig(**{k: _namespace(v) if k != "rope_scaling" else v for k, v in value.items()})
    return value


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The decoder sub-config transformers' ``get_text_config`` returns for the configs here."""
    for key in ("text_config", "llm_config", "language_config"):
        sub = config.get(key)
        if isinstance(sub, Mapping) and sub.get("num_attention_heads"):
            return sub
    return config


@dataclass
class ModelConfig:
    """What SGLang's ``ModelConfig`` derives from a config.json (the fields the memory code reads)."""

    hf_config: Any
    hf_text_config: Any
    dtype: str
    context_len: int
    attention_arch: str
    head_dim: int
    v_head_dim: int
    is_multimodal: bool
    is_multimodal_piecewise_cuda_graph_supported: bool
    is_multimodal_breakable_cuda_graph_supported: bool
    is_piecewise_cuda_graph_disabled_model: bool
    is_hybrid_swa: bool
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    get_total_num_kv_heads: Callable[[], int] = lambda: 0
    get_num_kv_heads: Callable[[int], int] = lambda tp: 0


def model_config(
    config: Mapping[str, Any],
    *,
    dtype: str = "auto",
    context_length: int | None = None,
    env: Mapping[str, str] | None = None,
) -> ModelConfig:
    """SGLang's derived model facts; raises SGLang's ``ValueError`` for a context above the model's.

    ``dtype`` is ``--dtype``; ``context_length`` is ``--context-length``; ``env`` the model's env.
    """
    hf = _namespace(config)
    text = _namespace(text_config(config))
    archs = list(config.get("architectures") or [])
    shell = types.SimpleNamespace(hf_config=hf, hf_text_config=text, is_draft_model=False, head_dim=None)
    _MODEL_NS["envs"] = Env(env or {}, _ENV_DEFAULTS)
    _MODEL_NS["_derive_model_shapes"](shell)
    _MODEL_NS["_derive_context_length"](shell, context_length)
    multimodal = _MC["is_multimodal_model"](archs)
    kv_cfg = types.SimpleNamespace(hf_config=hf, hf_text_config=text)
    result = ModelConfig(
        hf_config=hf,
        hf_text_config=text,
        dtype=_MC["_get_and_verify_dtype"](text_config(config), dtype),
        context_len=shell.context_len,
        attention_arch=shell.attention_arch,
        head_dim=shell.head_dim,
        v_head_dim=shell.v_head_dim,
        is_multimodal=multimodal,
        is_multimodal_piecewise_cuda_graph_supported=multimodal
        and any(a in _MC["multimodal_piecewise_cuda_graph_supported_model_archs"] for a in archs),
        is_multimodal_breakable_cuda_graph_supported=multimodal
        and any(a in _MC["multimodal_breakable_cuda_graph_supported_model_archs"] for a in archs),
        is_piecewise_cuda_graph_disabled_model=any(
            a in _MC["piecewise_cuda_graph_disabled_model_archs"] for a in archs
        )
        or (
            multimodal
            and not any(a in _MC["multimodal_piecewise_cuda_graph_supported_model_archs"] for a in archs)
        ),
        is_hybrid_swa=_MC["is_hybrid_swa_model"](archs, text),
        kv_lora_rank=getattr(shell, "kv_lora_rank", None),
        qk_rope_head_dim=getattr(shell, "qk_rope_head_dim", None),
    )
    heads = _Heads(hf, text)
    del kv_cfg
    result.get_total_num_kv_heads = heads.get_total_num_kv_heads
    result.get_num_kv_heads = heads.get_num_kv_heads
    return result


class _Heads:
    """``ModelConfig.get_total_num_kv_heads`` / ``get_num_kv_heads`` bound to one config."""

    get_total_num_kv_heads = oracle._mns["get_total_num_kv_heads"]
    get_num_kv_heads = oracle._mns["get_num_kv_heads"]

    def __init__(self, hf: Any, text: Any) -> None:
        self.hf_config = hf
        self.hf_text_config = text


# --------------------------------------------------------------------------- kv cache dtype

_KV = _run(
    _top_level("mem_cache/kv_cache_dtype.py", ["TORCH_DTYPE_TO_KV_CACHE_STR", "configure_kv_cache_dtype"]),
    {"torch": TORCH, "fp8_dtype": TORCH.float8_e4m3fn, "_is_hip": False, "logger": log, "Optional": object},
)


def _kv_choices() -> list[str]:
    """The ``choices`` of ``ServerArgs.kv_cache_dtype``'s ``Arg(...)`` (argparse enforces them)."""
    for node in ast.walk(_tree("server_args.py")):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "kv_cache_dtype":
            for call in ast.walk(node.annotation):
                if isinstance(call, ast.Call):
                    for keyword in call.keywords:
                        if keyword.arg == "choices":
                            return list(ast.literal_eval(keyword.value))
    raise AssertionError("kv_cache_dtype choices not found")


KV_CACHE_DTYPE_CHOICES = _kv_choices()


def kv_cache_dtype(flag: str, model_dtype: str, kv_cache_quant_algo: str | None = None) -> str:
    """The KV element SGLang allocates (``bf16``, ``fp16``, ``fp32``, ``fp8_e4m3``, ``fp8_e5m2``,
    ``fp4``); raises ``ValueError`` where SGLang refuses the flag (argparse's choices included)."""
    if flag not in KV_CACHE_DTYPE_CHOICES:
        raise ValueError(f"argument --kv-cache-dtype: invalid choice: {flag!r}")
    model = types.SimpleNamespace(quant_config=types.SimpleNamespace(kv_cache_quant_algo=kv_cache_quant_algo))
    _, dtype = _KV["configure_kv_cache_dtype"](
        server_args_kv_cache_dtype=flag,
        model=model,
        model_dtype=DType(model_dtype),
        is_draft_worker=False,
        is_dflash=False,
        speculative_draft_attention_backend=None,
    )
    return str(dtype)


# --------------------------------------------------------------------------- cell

oracle._pns["is_float4_e2m1fn_x2"] = lambda dtype: dtype == "fp4"


def cell(mc: ModelConfig, kv_dtype: str, flag: str, attn_tp: int, layers: int) -> int:
    """KV bytes per token of one rank holding ``layers`` layers (``_compute_cell_size``)."""
    pool_mc = types.SimpleNamespace(
        hf_config=mc.hf_config,
        hf_text_config=mc.hf_text_config,
        head_dim=mc.head_dim,
        v_head_dim=mc.v_head_dim,
        kv_lora_rank=mc.kv_lora_rank,
        qk_rope_head_dim=mc.qk_rope_head_dim,
        get_num_kv_heads=mc.get_num_kv_heads,
    )
    kvc = types.SimpleNamespace(
        model_config=pool_mc,
        kv_cache_dtype=kv_dtype,
        use_mla_backend=mc.attention_arch == "MLA",
        server_args=types.SimpleNamespace(kv_cache_dtype=flag),
    )
    oracle._pns["get_parallel"] = lambda: oracle._Parallel(attn_tp)
    return int(oracle.FakePoolConf._compute_cell_size(oracle.FakePoolConf, kvc, layers))


# --------------------------------------------------------------------------- parallel layout

_PP = _run(_top_level("distributed/utils.py", ["get_pp_indices"]), {"os": None, "Tuple": tuple})
_BOOT = _run(_top_level("distributed/bootstrap.py", ["_check_tp_memory_balance"]), {"logger": log})


def pp_layers(layers: int, pp: int) -> list[tuple[int, int]]:
    """``(start, end)`` of every PP rank (``get_pp_indices``, no ``SGLANG_PP_LAYER_PARTITION``)."""
    _PP["os"] = types.SimpleNamespace(getenv=lambda name, default=None: default)
    return [_PP["get_pp_indices"](layers, rank, pp) for rank in range(pp)]


def tp_balance(pre_gib: float, local_gib: float, env: Mapping[str, str] | None = None) -> None:
    """SGLang's TP memory-balance check on one rank; raises its ``RuntimeError`` when unbalanced."""
    _BOOT["envs"] = Env(env or {}, _ENV_DEFAULTS)
    _BOOT["_check_tp_memory_balance"](pre_model_load_memory=pre_gib, local_gpu_memory=local_gib)


# --------------------------------------------------------------------------- server args

_CG_NAMES = [
    "Phase",
    "Backend",
    "PhaseConfig",
    "default_prefill_backend",
    "CudaGraphConfig",
    "default_cuda_graph_config",
    "_diff_phase",
]
_CG = _run(
    [
        _replace(
            "\n".join(_top_level("model_executor/cuda_graph_config.py", _CG_NAMES)),
            "from sglang.srt.utils import is_cuda",
            "is_cuda = _is_cuda",
        )
    ],
    {
        "dataclass": __import__("dataclasses").dataclass,
        "field": __import__("dataclasses").field,
        "dataclasses": __import__("dataclasses"),
        "Optional": object,
        "List": list,
        "Dict": dict,
        "Any": object,
        "_is_cuda": lambda: True,
    },
)
_SA_NAMES = [
    "_parse_cuda_graph_config",
    "_apply_cuda_graph_compatibility",
    "_apply_cuda_graph_disaggregation_roles",
    "_disable_tc_piecewise_cudagraph_if_incompatible",
    "_disable_breakable_cudagraph_if_incompatible",
    "_handle_gpu_memory_settings",
    "reserve_for_graph_mb",
    "reserve_for_deepep_a2a_mb",
    "_generate_decode_cuda_graph_batch_sizes",
    "_generate_prefill_cuda_graph_batch_sizes",
    "adjust_mem_fraction_for_vlm",
]
_SA_SRC = oracle._extract("server_args.py", "ServerArgs", _SA_NAMES)
_SA_SRC["reserve_for_deepep_a2a_mb"] = _replace(
    _SA_SRC["reserve_for_deepep_a2a_mb"],
    "from sglang.srt.arg_groups.overrides import resolved_view",
    "resolved_view = lambda s: s",
)
for _name in (
    "_disable_breakable_cudagraph_if_incompatible",
    "_disable_tc_piecewise_cudagraph_if_incompatible",
):
    _SA_SRC[_name] = (
        _SA_SRC[_name]
        .replace(
            "from sglang.srt.arg_groups.overrides import resolved_view as _resolved_view",
            "_resolved_view = lambda s: s",
        )
        .replace(
            "from sglang.srt.configs.model_config import is_deepseek_v4", "is_deepseek_v4 = lambda c: False"
        )
    )
# Record the reserve before the 10 GiB floor: the memory SGLang's runtime itself allocates
# beside the pool (activations, graphs), used by the simulation as an instance's real use.
_SA_SRC["_handle_gpu_memory_settings"] = _insert_before(
    _SA_SRC["_handle_gpu_memory_settings"],
    "if gpu_mem is not None and gpu_mem > 60 * 1024:",
    "self.unfloored_reserve_mb = reserved_mem",
)
_SA_NS: dict[str, Any] = {
    "Backend": _CG["Backend"],
    "Phase": _CG["Phase"],
    "CudaGraphConfig": _CG["CudaGraphConfig"],
    "default_cuda_graph_config": _CG["default_cuda_graph_config"],
    "logger": log,
    "envs": types.SimpleNamespace(
        SGLANG_SYMM_MEM_PREALLOC_GB_SIZE=types.SimpleNamespace(is_set=lambda: True)
    ),
    "check_gguf_file": lambda path: False,
    "current_platform": types.SimpleNamespace(is_out_of_tree=lambda: False),
    "is_npu": lambda: False,
    "is_cpu": lambda: False,
    "is_mps": lambda: False,
    "is_xpu": lambda: False,
    "Any": object,
}
_run(list(_SA_SRC.values()), _SA_NS)

#: ``ServerArgs`` defaults of the fields the functions above read (``server_args.py``).
SERVER_ARG_DEFAULTS: dict[str, Any] = {
    "tp_size": 1,
    "pp_size": 1,
    "dp_size": 1,
    "chunked_prefill_size": None,
    "max_prefill_tokens": 16384,
    "mem_fraction_static": None,
    "device": "cuda",
    "disaggregation_mode": "null",
    "max_running_requests": None,
    "speculative_num_draft_tokens": None,
    "speculative_algorithm": None,
    "disable_cuda_graph_padding": False,
    "max_total_tokens": None,
    "model_path": "m",
    "context_length": None,
    "language_only": False,
    "enable_symm_mem": False,
    "moe_a2a_backend": "none",
    "enable_dp_attention": False,
    "attn_cp_size": 1,
    "dcp_size": 1,
    "lora_paths": None,
    "enable_lora": False,
    "cuda_graph_config": None,
    "disable_cuda_graph": False,
    "disable_prefill_cuda_graph": False,
    "disable_decode_cuda_graph": False,
    "cuda_graph_backend_decode": None,
    "cuda_graph_backend_prefill": None,
    "cuda_graph_max_bs_decode": None,
    "cuda_graph_max_bs_prefill": None,
    "cuda_graph_bs_decode": None,
    "cuda_graph_bs_prefill": None,
    "cuda_graph_tc_compiler": None,
    "enable_torch_compile": False,
    "load_format": "auto",
    "quantization": None,
    "dllm_algorithm": None,
    "cpu_offload_gb": 0,
    "enable_hierarchical_cache": False,
    "enable_deterministic_inference": False,
    "enable_eplb": False,
    "expert_distribution_recorder_mode": None,
    "debug_cuda_graph": False,
    "enable_dsa_prefill_context_parallel": False,
    "torch_compile_max_bs": 32,
}


class ServerArgs:
    """The ``ServerArgs`` fields and methods SGLang's memory settings read, upstream's code bound."""

    def __init__(self, mc: ModelConfig, hip: bool, **fields: Any) -> None:
        unknown = set(fields) - set(SERVER_ARG_DEFAULTS)
        assert not unknown, unknown
        self.__dict__.update({**SERVER_ARG_DEFAULTS, **fields})
        self._mc = mc
        self._hip = hip
        self.unfloored_reserve_mb: float | None = None
        #: ``mem_fraction_static`` as the memory settings leave it, before the attention backend's
        #: adjustment (ROCm aiter's 0.85): the value to pass as ``--mem-fraction-static``.
        self.memory_settings_fraction: float | None = None
        self.attention_backend: str | None = None

    def use_mla_backend(self) -> bool:
        return bool(self._mc.attention_arch == "MLA")

    def get_model_config(self) -> ModelConfig:
        return self._mc

    def _resolved(self) -> ServerArgs:
        return self

    def post_capture_kv_sizing_planned(self) -> bool:
        return False  # SGLANG_ENABLE_POST_CAPTURE_KV_SIZING defaults False (environ.py)


for _name in _SA_NAMES:
    setattr(ServerArgs, _name, _SA_NS[_name])


def _aiter_source() -> str:
    """The statement of ``_handle_attention_backend_compatibility`` that shrinks the fraction for
    the aiter backend, wrapped in a function of (self, model_config, resolved_view)."""
    method = oracle._extract("server_args.py", "ServerArgs", ["_handle_attention_backend_compatibility"])
    tree = ast.parse(method["_handle_attention_backend_compatibility"])
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "0.85" in ast.unparse(node) and "aiter" in ast.unparse(node.test):
            body = "\n".join("    " + line for line in ast.unparse(node).split("\n"))
            return f"def _aiter_factor(self, model_config, resolved_view):\n{body}"
    raise AssertionError("aiter fraction rule not found")


_ATTN = _run(
    [
        _replace(
            oracle._extract("server_args.py", "ServerArgs", ["_get_default_attn_backend"])[
                "_get_default_attn_backend"
            ],
            "from sglang.srt.arg_groups.overrides import resolved_view",
            "resolved_view = lambda s: s",
        ),
        _aiter_source(),
    ],
    {
        "current_platform": types.SimpleNamespace(is_out_of_tree=lambda: False),
        "is_hopper_with_cuda_12_3": lambda: False,
        "is_sm100_supported": lambda: False,
        "is_no_spec_infer_or_topk_one": lambda sa: True,
        "is_hip": lambda: True,
        "is_mps": lambda: False,
        "is_flashinfer_available": lambda: False,
    },
)


def _rocm_attention(sa: ServerArgs, mc: ModelConfig, backend: str | None) -> None:
    """On ROCm: SGLang's default attention backend (``_get_default_attn_backend``), and the aiter
    backend's 0.85 on the fraction for contexts above 8,192 tokens."""
    heads = types.SimpleNamespace(
        hf_config=mc.hf_config, get_num_kv_heads=mc.get_num_kv_heads, has_attention_sinks=False
    )
    shell = types.SimpleNamespace(tp_size=sa.tp_size, speculative_algorithm=None)
    sa.attention_backend = backend or _ATTN["_get_default_attn_backend"](shell, sa.use_mla_backend(), heads)
    model = types.SimpleNamespace(context_len=mc.context_len)
    _ATTN["_aiter_factor"](sa, model, lambda s: s)


def server_args(
    mc: ModelConfig,
    gpu_mem_mib: float,
    *,
    hip: bool = False,
    attention_backend: str | None = None,
    **fields: Any,
) -> ServerArgs:
    """SGLang's CUDA-graph resolution and memory settings for GPUs of ``gpu_mem_mib`` (the smallest
    total), as ``ServerArgs.__post_init__`` runs them, then on ROCm (``hip``) the attention backend
    and its fraction rule: ``.mem_fraction_static`` is the fraction the pool is sized with."""
    sa = ServerArgs(mc, hip, **fields)
    _CG["_is_cuda"] = lambda: not hip
    _SA_NS["is_hip"] = lambda: hip
    sa._parse_cuda_graph_config()
    sa._apply_cuda_graph_compatibility()
    sa._apply_cuda_graph_disaggregation_roles()
    sa._handle_gpu_memory_settings(gpu_mem_mib)
    sa.memory_settings_fraction = sa.mem_fraction_static
    if hip:
        _rocm_attention(sa, mc, attention_backend)
    return sa


# --------------------------------------------------------------------------- start-up


@dataclass(frozen=True)
class Start:
    """What SGLang does at start-up on a set of ranks: its tokens, or the failure and its cause."""

    tokens: int | None
    rest_bytes: int | None
    cause: (
        str | None
    )  # None: it starts; else tp_imbalance, load_oom, no_pool, not_enough_memory, fewer_than_2


#: SGLang needs at least 2 tokens: ``resolve_max_num_reqs`` caps requests at ``tokens // 2``.
MIN_TOKENS = 2


_KC = _run(
    list(
        oracle._extract(
            "mem_cache/kv_cache_configurator.py", "KVCacheConfigurator", ["_apply_token_constraints"]
        ).values()
    )
    + list(
        oracle._extract(
            "model_executor/pool_configurator.py",
            "DefaultPoolConfigurator",
            ["calculate_pool_sizes_from_max_tokens"],
        ).values()
    ),
    {
        "logging": types.SimpleNamespace(warning=lambda *a, **k: None),
        "MemoryPoolConfig": oracle._pns["MemoryPoolConfig"],
    },
)


def _capped(tokens: int, page: int, max_total_tokens: int | None) -> int:
    """``config_from_budget``: the user's ``--max-total-tokens`` cap, then the page alignment again."""
    kvc = types.SimpleNamespace(
        server_args=types.SimpleNamespace(max_total_tokens=max_total_tokens, pp_size=1)
    )
    limited = _KC["_apply_token_constraints"](kvc, tokens)
    if limited == tokens:
        return tokens
    return int(_KC["calculate_pool_sizes_from_max_tokens"](None, limited, page).max_total_num_tokens)


def start(
    pre_gib: Sequence[float],
    weights: Sequence[int],
    cells: Sequence[int],
    fraction: float,
    *,
    tp: int,
    page: int = 1,
    max_total_tokens: int | None = None,
    env: Mapping[str, str] | None = None,
) -> Start:
    """SGLang's start-up on ranks with free memory ``pre_gib`` (after its own context), loaded
    weights ``weights`` and cells ``cells`` (bytes, one per PP stage), rank by rank; the token
    count is the minimum over the stages (``_apply_token_constraints``' all-reduce)."""
    world = min(pre_gib)
    if tp > 1:
        try:
            for local in pre_gib:
                tp_balance(world, local, env)
        except RuntimeError:
            return Start(None, None, "tp_imbalance")
    if any(w > p * GIB for w, p in zip(weights, pre_gib, strict=True)):
        return Start(None, None, "load_oom")  # the CUDA allocator fails while weights load
    after = min(p - w / GIB for p, w in zip(pre_gib, weights, strict=True))
    tokens = []
    try:
        for rank_cell in cells:
            count, rest = oracle.upstream_tokens(rank_cell, page, world, after, fraction)
            tokens.append(_capped(count, page, max_total_tokens))
    except ValueError:
        return Start(None, None, "no_pool")
    except RuntimeError:
        return Start(None, None, "not_enough_memory")
    least = min(tokens)
    if least < MIN_TOKENS:
        return Start(least, rest, "fewer_than_2")
    return Start(least, rest, None)
