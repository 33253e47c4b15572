"""A seeded generator of hostile scheduling requests, and the checks every door must pass on them.

Hypothesis' text strategies leave out lone surrogates (category ``Cs``), and
the request that crashed the workers (issue 17, item 1) was exactly that: an
unknown key ``"\\ud800"`` whose value nests more than 64 levels. This
generator draws text from the *whole* code-point range, surrogates and
control characters included, and mutates a valid request the way a hostile
submitter could: unknown keys anywhere, values of the wrong type, deep
nesting, keys removed, strings that hold separators or escapes.

:func:`cases` is deterministic for a seed (``random.Random``), so a failing
case is reproduced by its seed and number. :func:`result_problems` is what
"survived" means for one result, whatever door produced it: the JSON parses
and encodes as UTF-8, nothing escaped as ``internal_error``, and a
rejection names a non-empty, encodable field.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from typing import Any

GIB = 1 << 30

#: Code points a hostile key or value likes: separators of our key schema and Lua lists,
#: JSON and shell metacharacters, control characters, lone surrogates, a non-BMP emoji.
SPECIAL = [
    *";:=.,{}[]\"\\'/~@%*?$`|&<>#!\x00\x01\x1b\x7f\t\n\r ",
    "\u2028", "\u200b", "\ufeff", "\ufffd", "\U0001f600",
    "\ud800", "\udbff", "\udc00", "\udfff",
]
#: Deepest nesting drawn (the limit is 64: both sides of it).
MAX_DEPTH = 80


def _text(rng: random.Random, longest: int = 12) -> str:
    """A string of code points from anywhere in U+0000..U+10FFFF (surrogates included)."""
    size = rng.choice([0, 1, 2, 3, 5, 8, longest, rng.randint(1, 300)])
    chars: list[str] = []
    for _ in range(size):
        pick = rng.random()
        if pick < 0.3:
            chars.append(rng.choice(SPECIAL))
        elif pick < 0.45:
            chars.append(chr(rng.randint(0xD800, 0xDFFF)))  # a lone surrogate
        elif pick < 0.7:
            chars.append(chr(rng.randint(0x20, 0x7E)))
        else:
            chars.append(chr(rng.randint(0, 0x10FFFF)))
    return "".join(chars)


def _nested(rng: random.Random, depth: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value] if rng.random() < 0.5 else {_text(rng, 3): value}
    return value


def _value(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value: every type, huge and odd numbers, strings, containers, deep nests."""
    kind = rng.randrange(11 if depth < 3 else 7)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, -1, 1, 2**31, 2**63, -(2**63) - 1, 2**70, 10**30, rng.randint(-999, 999)])
    if kind == 3:
        return rng.choice([0.5, -0.0, 1e308, -1e-308, 3.7, 1e20])
    if kind in (4, 5, 6):
        return _text(rng)
    if kind == 7:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if kind == 8:
        return {_text(rng, 6): _value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    if kind == 9:
        return _nested(rng, rng.randint(60, MAX_DEPTH), _value(rng, 3))
    return _text(rng, 64)


def _containers(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    """Every dict and list of ``node`` with its path (the root included), in document order."""
    found: list[tuple[tuple[Any, ...], Any]] = []
    pending: list[tuple[tuple[Any, ...], Any]] = [(path, node)]
    while pending:
        where, item = pending.pop()
        if isinstance(item, dict):
            found.append((where, item))
            pending.extend(((*where, key), child) for key, child in reversed(list(item.items())))
        elif isinstance(item, list):
            found.append((where, item))
            pending.extend(((*where, index), child) for index, child in reversed(list(enumerate(item))))
    return found


def _mutate(rng: random.Random, request: dict[str, Any]) -> None:
    """One mutation in place: add an unknown key, replace or drop a value, or bury one deep."""
    shallow = [(p, c) for p, c in _containers(request) if len(p) < 12]
    _, target = rng.choice(shallow)
    action = rng.randrange(5)
    if isinstance(target, dict):
        keys = list(target)
        if action <= 1 or not keys:
            target[_text(rng, 8)] = _value(rng)  # an unknown key, maybe a surrogate, maybe deep
        elif action == 2:
            target[rng.choice(keys)] = _value(rng)  # a known key with a value of any type
        elif action == 3:
            del target[rng.choice(keys)]
        else:
            key = rng.choice(keys)
            target[key] = _nested(rng, rng.randint(60, MAX_DEPTH), target[key])
    elif target:
        position = rng.randrange(len(target))
        if action <= 2:
            target[position] = _value(rng)
        elif action == 3:
            del target[position]
        else:
            target.append(_value(rng))
    else:
        target.append(_value(rng))


def base_request(request_id: str, *, cluster: bool) -> dict[str, Any]:
    """A valid tp-1 request (with a two-worker cluster inline when ``cluster``)."""
    request: dict[str, Any] = {
        "request_id": request_id,
        "model": {
            "id": 7, "name": "qwen2.5-7b", "backend": "SGLang", "backend_parameters": ["--tp-size", "1"],
            "categories": ["llm"], "cluster_id": 1, "worker_selector": {"gpu": "4090"},
            "env": {"A": "1"}, "placement_strategy": "spread",
            "hf_config": {
                "architectures": ["Qwen2ForCausalLM"], "num_attention_heads": 28, "num_key_value_heads": 4,
                "hidden_size": 3584, "num_hidden_layers": 28, "vocab_size": 152064,
                "max_position_embeddings": 32768,
            },
            "weight_bytes": 15_231_233_024,
        },
    }
    if cluster:
        request["workers"] = [_worker_row(1), _worker_row(2)]
        request["model_instances"] = [{
            "id": 1, "name": "busy", "model_id": 9, "worker_id": 1, "worker_name": "node-1",
            "gpu_type": "cuda", "gpu_indexes": [0],
            "computed_resource_claim": {"vram": {"0": 4 * GIB}},
        }]
    return request


def _worker_row(wid: int) -> dict[str, Any]:
    return {
        "id": wid, "name": f"node-{wid}", "ip": f"10.0.0.{wid}", "cluster_id": 1, "state": "ready",
        "labels": {"gpu": "4090"}, "system_reserved": {"ram": 0, "vram": 0},
        "status": {"memory": {"total": 512 * GIB}, "gpu_devices": [
            {"uuid": f"GPU-{wid}-{i}", "name": "RTX 4090", "vendor": "nvidia", "type": "cuda", "index": i,
             "memory": {"total": 26_015_170_560}} for i in range(2)
        ]},
    }


def cases(seed: int, count: int, *, cluster: bool = True, prefix: str = "fz") -> Iterator[dict[str, Any]]:
    """``count`` mutated requests, the same ones for the same seed (1–4 mutations each).

    Each starts with its own id ``<prefix>-<seed>-<n>`` (a mutation may change or drop it).
    """
    rng = random.Random(seed)
    base = base_request("-", cluster=cluster)
    for number in range(count):
        request = copy.deepcopy(base)
        request["request_id"] = f"{prefix}-{seed}-{number}"
        for _ in range(rng.randint(1, 4)):
            _mutate(rng, request)
        yield request


def encodable(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (our own check, with the codec itself)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def result_problems(text: str) -> list[str]:
    """What is wrong with one result's JSON text (empty: it survived).

    The text must encode as UTF-8 and parse; a ``rejected`` result must not be an
    ``internal_error`` (an exception that escaped), and unless the service gave up on
    the message (``dead_lettered``) its error names a non-empty field; field and
    message must encode.
    """
    if not encodable(text):
        return ["the result text does not encode as UTF-8"]
    try:
        result = json.loads(text)
    except ValueError as error:
        return [f"the result is not JSON: {error}"]
    problems: list[str] = []
    for where, value in _strings(result):
        if not encodable(value):
            problems.append(f"{where} does not encode")
    if result.get("status") == "rejected":
        error = result.get("error") or {}
        if error.get("code") == "internal_error":
            problems.append(f"internal_error: {error.get('message')}")
        elif error.get("code") != "dead_lettered" and not error.get("field"):
            problems.append(f"a rejection names no field: {error}")
    return problems


def _strings(value: Any) -> Iterator[tuple[str, str]]:
    pending: list[tuple[str, Any]] = [("result", value)]
    while pending:
        where, item = pending.pop()
        if isinstance(item, str):
            yield where, item
        elif isinstance(item, dict):
            for key, child in item.items():
                yield f"{where} key", str(key)
                pending.append((f"{where}.{key}", child))
        elif isinstance(item, list):
            pending.extend((f"{where}.{i}", child) for i, child in enumerate(item))


# ------------------------------------------------------------------- the doors
def through_schedule(requests: list[dict[str, Any]]) -> list[str]:
    """Problems of ``schedule()`` on each request (in process): an exception or a bad result."""
    from scheduler_core import schedule

    problems: list[str] = []
    for number, request in enumerate(requests):
        try:
            text = schedule(request).model_dump_json()
        except Exception as error:  # the contract is "never raises": an escape is a finding
            problems.append(f"case {number}: schedule() raised {type(error).__name__}: {error!r}"[:300])
            continue
        problems.extend(f"case {number}: {problem}" for problem in result_problems(text))
    return problems


def request_file_text(request: dict[str, Any]) -> str:
    """The request as a file holds it: JSON with every lone surrogate as its ``\\uXXXX`` escape."""
    return json.dumps(request)


def through_cli(requests: list[dict[str, Any]]) -> list[str]:
    """Problems of ``gpusched schedule -`` on each request, run by the CLI's own ``main`` in
    this process with stdin, stdout and stderr as strict UTF-8 byte streams (what a
    terminal or a pipe accepts): the exit code is 0 or 2, stdout one result, stderr at
    most one line and never "unexpected error"."""
    problems: list[str] = []
    for number, request in enumerate(requests):
        code, out, err = run_cli_in_process(["schedule", "-"], request_file_text(request))
        problems.extend(f"case {number}: {p}" for p in cli_problems(code, out, err))
    return problems


def run_cli_in_process(argv: list[str], stdin_text: str) -> tuple[int, bytes, bytes]:
    """``gpusched ARGV`` through :func:`tasks.edges.cli.main` with byte-level strict UTF-8 streams."""
    import io
    import sys

    from tasks.edges.cli import main

    saved = sys.stdin, sys.stdout, sys.stderr
    out, err = io.BytesIO(), io.BytesIO()
    streams = [io.TextIOWrapper(io.BytesIO(stdin_text.encode()), encoding="utf-8"),
               io.TextIOWrapper(out, encoding="utf-8", errors="strict", write_through=True),
               io.TextIOWrapper(err, encoding="utf-8", errors="strict", write_through=True)]
    sys.stdin, sys.stdout, sys.stderr = streams
    try:
        code = main(argv)
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
    return code, out.getvalue(), err.getvalue()


def cli_problems(code: int, out: bytes, err: bytes) -> list[str]:
    """What is wrong with one ``gpusched schedule`` run (exit code, stdout, stderr)."""
    problems: list[str] = []
    text = err.decode("utf-8", "replace")
    if code not in (0, 2):
        problems.append(f"exit code {code}: {text.strip()[:200]}")
    if "unexpected error" in text or "Traceback" in text:
        problems.append(f"stderr: {text.strip()[:200]}")
    if text.count("\n") > 1:
        problems.append(f"stderr holds {text.count(chr(10))} lines")
    if not out.strip():
        return [*problems, "no result on stdout"]
    try:
        problems.extend(result_problems(out.decode("utf-8")))
    except UnicodeDecodeError:
        problems.append("stdout is not UTF-8")
    return problems
