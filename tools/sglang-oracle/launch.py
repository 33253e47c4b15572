"""SGLang's start-up for a gpusched model row, its launch arguments and the GPUs it lands on.

:func:`launch` turns a Contract-1 ``model`` (``hf_config``, ``weight_bytes``, ``env``) and
the argv ``schedule()`` launches it with into SGLang's ``ServerArgs`` fields, then asks
SGLang's own code (:mod:`extra`) what happens on each replica: the fraction it computes, the
KV cell on every rank, the weights every rank holds (:mod:`checkpoint`), and whether it
starts and with how many tokens. A refusal of the arguments themselves (argparse's choices,
``configure_kv_cache_dtype``, ``_derive_context_length``, ``_get_and_verify_dtype``) comes
back as ``fatal`` with SGLang's message.

Ranks follow SGLang's layout: replica ``d`` (``--dp-size`` without DP attention) runs on the
``d``-th block of ``tp × pp`` GPUs, PP stage ``s`` of it on the ``s``-th ``tp`` GPUs.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import checkpoint
import extra

GIB = 1 << 30

#: SGLang flags → (``ServerArgs`` field, type). ``--cuda-graph-max-bs`` is the deprecated alias
#: of ``--cuda-graph-max-bs-decode``.
_VALUED: Mapping[str, tuple[str, type]] = {
    "--tp-size": ("tp_size", int),
    "--tensor-parallel-size": ("tp_size", int),
    "--pp-size": ("pp_size", int),
    "--pipeline-parallel-size": ("pp_size", int),
    "--dp-size": ("dp_size", int),
    "--data-parallel-size": ("dp_size", int),
    "--mem-fraction-static": ("mem_fraction_static", float),
    "--chunked-prefill-size": ("chunked_prefill_size", int),
    "--max-prefill-tokens": ("max_prefill_tokens", int),
    "--max-running-requests": ("max_running_requests", int),
    "--max-total-tokens": ("max_total_tokens", int),
    "--cuda-graph-max-bs": ("cuda_graph_max_bs_decode", int),
    "--cuda-graph-max-bs-decode": ("cuda_graph_max_bs_decode", int),
    "--cuda-graph-max-bs-prefill": ("cuda_graph_max_bs_prefill", int),
    "--cuda-graph-backend-prefill": ("cuda_graph_backend_prefill", str),
    "--cuda-graph-backend-decode": ("cuda_graph_backend_decode", str),
    "--moe-a2a-backend": ("moe_a2a_backend", str),
    "--attn-cp-size": ("attn_cp_size", int),
    "--dcp-size": ("dcp_size", int),
    "--context-length": ("context_length", int),
    "--disaggregation-mode": ("disaggregation_mode", str),
}
_SWITCHES: Mapping[str, str] = {
    "--disable-cuda-graph": "disable_cuda_graph",
    "--disable-prefill-cuda-graph": "disable_prefill_cuda_graph",
    "--disable-decode-cuda-graph": "disable_decode_cuda_graph",
    "--enable-lora": "enable_lora",
    "--enable-dp-attention": "enable_dp_attention",
    "--language-only": "language_only",
}
#: Flags read outside ``ServerArgs``' memory fields.
_OTHER = ("--kv-cache-dtype", "--dtype", "--page-size", "--attention-backend")


def parse(argv: Sequence[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """(``ServerArgs`` fields, other flags) of an argv; later occurrences win, as in argparse."""
    words = [w for part in argv for w in shlex.split(part)]
    fields: dict[str, Any] = {}
    other: dict[str, str] = {}
    index = 0
    while index < len(words):
        word = words[index]
        name, _, inline = word.partition("=")
        value = inline or (words[index + 1] if index + 1 < len(words) else "")
        step = 1 if inline or name in _SWITCHES else 2
        if name in _SWITCHES:
            fields[_SWITCHES[name]] = True
        elif name in _VALUED:
            field, kind = _VALUED[name]
            fields[field] = kind(value)
        elif name in _OTHER:
            other[name] = value
        index += step
    return fields, other


@dataclass(frozen=True)
class Launch:
    """What SGLang does with a placement."""

    fatal: str | None  # SGLang's message when it refuses the arguments
    fraction: float | None = None  # the ``mem_fraction_static`` it runs with
    #: the fraction before the attention backend's adjustment (ROCm aiter): what it would print
    #: as its default, the value a launch passes as ``--mem-fraction-static``
    launch_fraction: float | None = None
    cells: tuple[int, ...] = ()  # KV bytes per token on each PP stage's ranks
    weights: tuple[int, ...] = ()  # weight bytes on each PP stage's ranks
    starts: tuple[extra.Start, ...] = ()  # one per replica
    reserve_mib: float = 0.0  # SGLang's activation and graph reserve before its 10 GiB floor
    context_len: int = 0

    @property
    def cause(self) -> str | None:
        """The first replica's failure cause (None: every replica starts)."""
        return next((s.cause for s in self.starts if s.cause is not None), None)

    @property
    def tokens(self) -> int | None:
        """The smallest replica's KV tokens (None when one fails before sizing its pool)."""
        counts = [s.tokens for s in self.starts]
        return None if any(c is None for c in counts) else min(c for c in counts if c is not None)


def _model(row: Mapping[str, Any], fields: Mapping[str, Any], other: Mapping[str, str]) -> extra.ModelConfig:
    return extra.model_config(
        row["hf_config"],
        dtype=other.get("--dtype", "auto"),
        context_length=fields.get("context_length"),
        env=row.get("env") or {},
    )


def _kv(row: Mapping[str, Any], mc: extra.ModelConfig, other: Mapping[str, str]) -> str:
    quant = row["hf_config"].get("quantization_config") or {}
    return extra.kv_cache_dtype(
        other.get("--kv-cache-dtype", "auto"), mc.dtype, quant.get("kv_cache_quant_algo")
    )


def launch(
    row: Mapping[str, Any],
    argv: Sequence[str],
    gpus: Sequence[tuple[int, int]],
    context_gib: float,
    *,
    hip: bool = False,
) -> Launch:
    """SGLang's start-up of ``row`` with ``argv`` on ``gpus`` ((total, free) bytes, in rank order)."""
    fields, other = parse(argv)
    try:
        mc = _model(row, fields, other)
        kv_dtype = _kv(row, mc, other)
    except ValueError as error:
        return Launch(fatal=str(error))
    mib = min(total for total, _ in gpus) / 2**20
    sa = extra.server_args(mc, mib, hip=hip, attention_backend=other.get("--attention-backend"), **fields)
    tp, pp, dp = sa.tp_size, sa.pp_size, sa.dp_size
    attn_tp = tp // dp if sa.enable_dp_attention else tp
    layers = mc.hf_text_config.num_hidden_layers
    cells = tuple(
        extra.cell(mc, kv_dtype, other.get("--kv-cache-dtype", "auto"), attn_tp, end - start)
        for start, end in extra.pp_layers(layers, pp)
    )
    weights = tuple(checkpoint.loaded(row["hf_config"], tp=tp, pp=pp, dtype=other.get("--dtype", "auto")))
    replicas = 1 if sa.enable_dp_attention else dp
    fraction, launch_fraction = sa.mem_fraction_static, sa.memory_settings_fraction
    page = int(other.get("--page-size", "1") or 1)
    world = tp * pp
    starts = []
    for replica in range(replicas):
        ranks = gpus[replica * world : (replica + 1) * world]
        pre = [(free - context_gib * GIB) / GIB for _, free in ranks]
        rank_weights = [weights[rank // tp] for rank in range(world)]
        starts.append(
            extra.start(
                pre,
                rank_weights,
                list(cells),
                fraction,
                tp=tp,
                page=page,
                max_total_tokens=sa.max_total_tokens,
                env=row.get("env"),
            )
        )
    if sa.unfloored_reserve_mb is None:  # a user's fraction: SGLang's estimate, computed without it
        heuristic = {k: v for k, v in fields.items() if k != "mem_fraction_static"}
        sa = extra.server_args(mc, mib, hip=hip, **heuristic)
    return Launch(
        fatal=None,
        fraction=fraction,
        launch_fraction=launch_fraction,
        cells=cells,
        weights=weights,
        starts=tuple(starts),
        reserve_mib=sa.unfloored_reserve_mb or 0.0,
        context_len=mc.context_len,
    )
