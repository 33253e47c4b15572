"""SGLang's memory tiers: two versions' rows, one reader (issue 21, item 6).

Values from the two tables as SGLang wrote them: GPUStack's port of server_args at
037c3982 (NPU rows inline, exclusive bounds) and SGLang 0.5.16 (NPU rows first,
inclusive, in ``hardware_backend/npu/utils.py``).
"""

from __future__ import annotations

import pytest

from scheduler_core.sglang_args import GPUSTACK_TIERS, SGLANG_0_5_16_TIERS

GIB = 1024  # MiB


@pytest.mark.parametrize(
    ("table", "mem", "npu", "tp", "expected"),
    [
        (GPUSTACK_TIERS, 24 * GIB, False, 1, (2048, 24)),  # a 4090: the A10 row
        (GPUSTACK_TIERS, 24 * GIB, True, 4, (32768, 64)),  # an NPU of that size: Atlas A2B4
        (GPUSTACK_TIERS, 80 * GIB, False, 8, (8192, 512)),  # H100 at tp 8
        (GPUSTACK_TIERS, 192 * GIB, False, 2, (16384, 512)),  # above the last row: the top tier
        (GPUSTACK_TIERS, 0, False, 1, (4096, 160)),  # memory unknown
        (SGLANG_0_5_16_TIERS, 32 * GIB, True, 1, (4096, 16)),  # inclusive NPU bound
        (SGLANG_0_5_16_TIERS, 64 * GIB, True, 4, (8192, 256)),
        (SGLANG_0_5_16_TIERS, 70 * GIB, True, 1, (8192, 256)),  # an NPU past its rows: generic
        (SGLANG_0_5_16_TIERS, 34 * GIB, False, 1, (2048, 24)),  # a GPU skips the NPU rows
        (SGLANG_0_5_16_TIERS, 35 * GIB, False, 4, (4096, 160)),  # exclusive generic bound
    ],
)
def test_one_reader_gives_each_versions_row(table, mem, npu, tp, expected) -> None:
    assert table.defaults(mem, npu, tp) == expected
