"""``policy: precise``: placements that fit what SGLang will really do (see docs/policy-precise.md).

Follows SGLang 0.5.16. Modules: :mod:`.fraction` (its ``--mem-fraction-static`` rules),
:mod:`.graphs` (its CUDA-graph backends, which decide the graph reserve), :mod:`.startup`
(dtype, context length, KV dtype, architecture lists, the arguments it refuses),
:mod:`.weights` (the bytes each rank holds), :mod:`.kv` (KV bytes per token and capacity),
:mod:`.facts` (the rules' inputs), :mod:`.fit` (SGLang's start-up per rank),
:mod:`.windows` (GPU sets and SGLang's TP balance),
:mod:`.single_worker` / :mod:`.multi_worker` (the strategies), :mod:`.scoring`
(the fragmentation-aware scorer), :mod:`.messages`, :mod:`.settings`.
"""
