"""Redis keys the bridge itself writes (in the partition's prefix, per GPUStack cluster)::

gpusched:gpustack:<cluster>:foreign        hash: instance id -> request id, instances another
                                           scheduler placed after gpusched (counted as GPUStack's)
gpusched:gpustack:<cluster>:shadow         stream: one entry per shadow comparison (trimmed)
gpusched:gpustack:<cluster>:shadow:counts  hash: verdict -> count
"""

from __future__ import annotations

from dataclasses import dataclass

from tasks.base.keys import Keys

#: Approximate length the shadow stream is trimmed to.
SHADOW_MAXLEN = 100_000


@dataclass(frozen=True, slots=True)
class BridgeKeys:
    keys: Keys
    cluster_id: int

    @property
    def base(self) -> str:
        return f"{self.keys.prefix}:gpustack:{self.cluster_id}"

    @property
    def foreign(self) -> str:
        return f"{self.base}:foreign"

    @property
    def shadow(self) -> str:
        return f"{self.base}:shadow"

    @property
    def shadow_counts(self) -> str:
        return f"{self.base}:shadow:counts"
