"""The GPUStack bridge: ``gpusched gpustack --server URL --cluster-id N --mode place|shadow``.

Modules: ``api`` (GPUStack's REST API and watch streams), ``rows`` (its rows, validated and
reduced), ``ids`` (an instance's request id), ``follow`` (list + watch, re-sync, the mirror),
``evaluate`` (the categories GPUStack's evaluation would set), ``gpusched_side`` (what the
bridge asks of gpusched), ``writeback`` (placements written as GPUStack's scheduler writes
them), ``place`` and ``cluster_sync`` (place mode), ``shadow`` (shadow mode and its report),
``keys``, ``metrics``, ``bridge`` (the process), ``cli``. See docs/gpustack.md.
"""
