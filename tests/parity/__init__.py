"""Differential test of ``policy: "gpustack"`` against GPUStack's own scheduler code.

``generator`` makes seeded, realistic Contract-1 requests; ``oracle_client`` runs
them through the vendored oracle (``tools/gpustack-oracle``); ``compare`` reduces
both results to the fields that must agree and excuses only the deliberate
differences the README lists; ``shrink`` reduces a differing request to a small
one; ``run`` is the command line (``make parity``).
"""
