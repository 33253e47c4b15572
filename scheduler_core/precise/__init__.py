"""``policy: precise``: placements that fit what SGLang will really do (see docs/policy-precise.md).

Modules: :mod:`.fraction` (SGLang's current ``--mem-fraction-static`` rules),
:mod:`.kv` (KV bytes per token and capacity), :mod:`.facts` (the rules' inputs),
:mod:`.fit` (the per-rank fit), :mod:`.windows` (balanced GPU sets),
:mod:`.single_worker` / :mod:`.multi_worker` (the strategies), :mod:`.scoring`
(the fragmentation-aware scorer), :mod:`.messages`, :mod:`.settings`.
"""
