"""Pin issue-8 rules as regression cases: generated requests we decide as GPUStack does, shrunk.

For each rule below, the first generated scenario that carries its tag, on
which gpusched and the oracle agree, and on which the rule's feature matters
(taking the feature away changes GPUStack's decision), is shrunk while
GPUStack's decision, our agreement with it and the feature's effect all stay;
the result is written to ``regressions/`` (``python -m tests.parity.run --pin``).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.parity.check import classify, ours
from tests.parity.compare import comparable
from tests.parity.excuses import argv, parameter
from tests.parity.generator import generate
from tests.parity.regressions_io import REGRESSIONS, write_case
from tests.parity.shrink import shrink

Json = dict[str, Any]
Decide = Callable[[Json], Json]


def _no_parameters(request: Json) -> Json:
    out = copy.deepcopy(request)
    out["model"]["backend_parameters"] = []
    return out


def _no_manual(request: Json) -> Json:
    out = copy.deepcopy(request)
    out["model"].pop("gpu_selector", None)
    return out


def _single_node(request: Json) -> Json:
    out = copy.deepcopy(request)
    out["model"]["distributed_inference_across_workers"] = False
    return out


def _model_in_cluster(request: Json) -> Json:
    out = copy.deepcopy(request)
    out["model"]["cluster_id"] = next((w.get("cluster_id") for w in out["workers"]), 1)
    return out


def _selected(result: Json) -> Json:
    return result["candidates"][result["selected"]] if result.get("selected") is not None else {}


def _params(request: Json) -> list[str]:
    return [p for p in request["model"].get("backend_parameters") or [] if isinstance(p, str)]


def _element(test: Callable[[str], bool]) -> Callable[[Json], bool]:
    return lambda request: any(test(p) for p in _params(request))


def _flags(element: str) -> int:
    return sum(1 for word in element.split() if word.startswith("--"))


def _tp_not_int(request: Json) -> bool:
    value = parameter(_params(request), ("tp-size", "tensor-parallel-size"))
    return value is not None and not value.strip().lstrip("-").isdigit()


def _bare_then_valued(request: Json) -> bool:
    tokens = argv(_params(request))
    return any(a == "--tp-size" and b.startswith("--tp-size=") for a, b in itertools.pairwise(tokens))


def _model_key(key: str, test: Callable[[Any], bool]) -> Callable[[Json], bool]:
    return lambda request: key in request["model"] and test(request["model"][key])


@dataclass(frozen=True)
class Rule:
    """A rule to pin: ``present`` tells the feature is there; ``without`` drops it (if that matters)."""

    tag: str
    text: str
    present: Callable[[Json], bool]
    without: Callable[[Json], Json] | None = None
    wanted: Callable[[Json], bool] = lambda result: True


RULES: tuple[Rule, ...] = (
    Rule(
        "params:one_element",
        "rule 1: a flag and its value in one element ('--tp-size 4') are tokenised",
        _element(lambda p: _flags(p) == 1 and " " in p.strip()),
        _no_parameters,
    ),
    Rule(
        "params:padded",
        "rule 1: a padded element ('  --tp-size  4 ') is tokenised",
        _element(lambda p: p != p.strip() and " " in p.strip()),
        _no_parameters,
    ),
    Rule(
        "params:joined",
        "rule 1: several flags in one element ('--tp-size 2 --pp-size 2') are tokenised",
        _element(lambda p: _flags(p) > 1),
        _no_parameters,
    ),
    Rule(
        "params:quoted",
        "rule 1: quotes are stripped ('--tp-size=\"2\"')",
        _element(lambda p: p.startswith("--") and ('"' in p or "'" in p)),
        _no_parameters,
    ),
    Rule(
        "params:continuation",
        "rule 1: a pasted command with backslash-newline continuations is tokenised",
        _element(lambda p: "\\\n" in p),
        _no_parameters,
    ),
    Rule(
        "repeated_flag",
        "rule 1: a bare flag followed by a valued one reads the valued one",
        _bare_then_valued,
        _no_parameters,
    ),
    Rule("parallel:not_int", "rule 1: a non-integer parallel size counts as unset", _tp_not_int),
    Rule(
        "parallel:nnodes",
        "rule 1: --nnodes is read through the tokeniser (tp divisible by nnodes)",
        lambda r: parameter(_params(r), ("nnodes",)) is not None,
        _no_parameters,
    ),
    Rule(
        "backend_null",
        "rule 2: model.backend null is accepted and treated as SGLang",
        _model_key("backend", lambda v: v is None),
    ),
    Rule(
        "gpus_per_replica:zero",
        "rule 3: gpu_selector.gpus_per_replica 0 means unset",
        _model_key("gpu_selector", lambda v: bool(v and v.get("gpu_ids")) and v.get("gpus_per_replica") == 0),
        None,
        lambda result: "estimate" in result,
    ),
    Rule(
        "workload:big",
        "rule 4: multi-worker placement over whole nodes (no TP check at the memory-group gate)",
        lambda r: True,
        _single_node,
        lambda result: bool(_selected(result).get("subordinate_workers")),
    ),
    Rule(
        "world_size_mismatch",
        "rule 5: the world-size mismatch error has GPUStack's full text",
        _model_key("gpu_selector", bool),
        _no_parameters,
        lambda result: result.get("status") == "rejected",
    ),
    Rule(
        "manual",
        "rule 6: manual-overcommit messages as GPUStack writes them",
        _model_key("gpu_selector", bool),
        _no_manual,
        lambda result: bool(_selected(result).get("overcommit")),
    ),
    Rule(
        "model_cluster_null",
        "rule 7: a model with cluster_id null matches no worker of a cluster",
        _model_key("cluster_id", lambda v: v is None),
        _model_in_cluster,
    ),
    Rule(
        "label_selector",
        "rule 7: the label filter line only when it removed a worker",
        _model_key("worker_selector", bool),
        None,
        lambda result: any("label selector" in m for m in result.get("filter_messages") or []),
    ),
    Rule(
        "unbalanced_quote",
        "rule 8: constructor errors under 'No suitable workers.\\nDetails:\\n'",
        _element(lambda p: p.count('"') % 2 == 1),
        None,
        lambda result: "Failed to initialize" in str(result.get("state_message")),
    ),
)


def _agrees(request: Json, theirs: Json) -> bool:
    return classify("pin", (), request, ours(request), theirs).verdict == "identical"


def _matters(rule: Rule, decide: Decide, request: Json, expected: Json) -> bool:
    return rule.without is None or comparable(decide(rule.without(request))) != expected


def _qualifies(rule: Rule, decide: Decide, request: Json) -> bool:
    """The feature is there, GPUStack's decision is the kind wanted, we agree with it, the feature matters."""
    if not rule.present(request):
        return False
    theirs = decide(request)
    if not (rule.wanted(theirs) and _agrees(request, theirs)):
        return False
    return _matters(rule, decide, request, comparable(theirs))


def pin(rule: Rule, decide: Decide, seeds: tuple[int, ...] = (1, 2), count: int = 2500) -> Path | None:
    """Write one shrunk case for ``rule`` into regressions/; None when no scenario qualifies."""
    for item in (s for seed in seeds for s in generate(seed, count)):
        if rule.tag not in item.tags or not _qualifies(rule, decide, item.request):
            continue
        small = shrink(
            item.request,
            lambda request: _qualifies(rule, decide, request),
            keep_model_fields=("weight_bytes",),
        )
        name = rule.tag.replace(":", "-").replace("_", "-")
        path = REGRESSIONS / f"{name}--{item.id}.json"
        rule_text = f"{rule.text} (GPUStack's decision; shrunk from scenario {item.id})"
        write_case(path, {"rule": rule_text, "request": small, "expected": comparable(decide(small))})
        return path
    return None
