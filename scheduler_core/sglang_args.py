"""SGLang's launch arguments both policies read: the parallel sizes' names, the memory tiers.

The spellings of the parallel sizes (``server_args.py``) are read by GPUStack's
rules and the precise rules alike (:data:`TP_NAMES`, :data:`PP_NAMES`, :data:`DP_NAMES`).

SGLang sizes ``--chunked-prefill-size`` and the CUDA-graph batch bound from
the GPU's memory (``server_args.py: _handle_gpu_memory_settings``). GPUStack
ported the table at SGLang 037c3982 (``policy: gpustack`` must match that
port); ``policy: precise`` follows SGLang 0.5.16 (bd3f6a793), whose NPU rows
moved to ``hardware_backend/npu/utils.py`` with inclusive bounds. The rows
differ, the reading does not: :meth:`TierTable.defaults` is the one reader.
"""

from __future__ import annotations

from dataclasses import dataclass

#: SGLang's spellings of the parallel sizes (``server_args.py``), shared by both policies.
TP_NAMES = ("tp-size", "tensor-parallel-size")
PP_NAMES = ("pp-size", "pipeline-parallel-size")
DP_NAMES = ("dp-size", "data-parallel-size")


@dataclass(frozen=True, slots=True)
class TierRow:
    """One tier: GPUs below ``upper_mib`` (at most, when ``inclusive``) get ``chunk`` and the
    graph bound for tp < 4 / tp ≥ 4; ``npu_only`` rows match Ascend NPUs only."""

    upper_mib: float
    chunk: int
    bs_small_tp: int
    bs_large_tp: int
    npu_only: bool = False
    inclusive: bool = False

    def matches(self, gpu_mem_mib: float, npu: bool) -> bool:
        """Whether a GPU of this memory (and platform) falls in the tier."""
        if self.npu_only and not npu:
            return False
        return gpu_mem_mib <= self.upper_mib if self.inclusive else gpu_mem_mib < self.upper_mib


@dataclass(frozen=True, slots=True)
class TierTable:
    """A version's tiers, in the order SGLang tries them, and its two fall-backs."""

    rows: tuple[TierRow, ...]
    #: Above the last tier (B200, MI300): chunk, graph bound for tp < 4, for tp ≥ 4.
    top: tuple[int, int, int] = (16384, 512, 512)
    #: When the GPU memory is unknown (0): chunk, graph bound.
    unknown: tuple[int, int] = (4096, 160)

    def defaults(self, gpu_mem_mib: float, npu: bool, tp: int) -> tuple[int, int]:
        """``(chunked_prefill_size, graph max batch size)`` for this GPU memory and tp."""
        if gpu_mem_mib <= 0:
            return self.unknown
        for row in self.rows:
            if row.matches(gpu_mem_mib, npu):
                return row.chunk, row.bs_small_tp if tp < 4 else row.bs_large_tp
        return self.top[0], self.top[1] if tp < 4 else self.top[2]


_GIB_IN_MIB = 1024

#: SGLang server_args at 037c3982, as GPUStack ports it: exclusive bounds, NPU rows inline.
GPUSTACK_TIERS = TierTable((
    TierRow(20 * _GIB_IN_MIB, 2048, 8, 8),  # T4, 4080
    TierRow(32 * _GIB_IN_MIB, 32768, 16, 64, npu_only=True),  # Atlas A2B4
    TierRow(35 * _GIB_IN_MIB, 2048, 24, 80),  # A10, 4090, 5090
    TierRow(60 * _GIB_IN_MIB, 4096, 32, 160),  # A100 40GB, L40
    TierRow(64 * _GIB_IN_MIB, 32768, 64, 128, npu_only=True),  # Atlas A2 / A3
    TierRow(90 * _GIB_IN_MIB, 8192, 256, 512),  # H100, A100 80GB
    TierRow(160 * _GIB_IN_MIB, 8192, 256, 512),  # H20, H200
))

#: SGLang 0.5.16 (bd3f6a793): the NPU tiers first (``set_default_server_args``, inclusive
#: bounds), then the generic ones (``_handle_gpu_memory_settings``, exclusive).
SGLANG_0_5_16_TIERS = TierTable((
    TierRow(32 * _GIB_IN_MIB, 4096, 16, 64, npu_only=True, inclusive=True),
    TierRow(64 * _GIB_IN_MIB, 8192, 64, 256, npu_only=True, inclusive=True),
    TierRow(20 * _GIB_IN_MIB, 2048, 8, 8),  # T4, 4080
    TierRow(35 * _GIB_IN_MIB, 2048, 24, 80),  # A10, 4090, 5090
    TierRow(60 * _GIB_IN_MIB, 4096, 32, 160),  # A100-40G, L40
    TierRow(90 * _GIB_IN_MIB, 8192, 256, 512),  # H100, A100-80G
    TierRow(160 * _GIB_IN_MIB, 8192, 256, 512),  # H20, H200
))
