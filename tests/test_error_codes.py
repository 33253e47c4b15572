"""Every ``error.code`` a result can carry (``error``, ``launch.diffusion.error``) is listed, with its
meaning, in docs/service.md's table of error codes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The calls that set a result's error code, and where their code argument is.
CODE_ARGUMENT = {"RequestError": 2, "rejected": 1}


def _literal_codes(tree: ast.AST, constants: dict[str, str]) -> set[str]:
    codes: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
        values = [k.value for k in node.keywords if k.arg == "code"]
        position = CODE_ARGUMENT.get(name or "")
        if position is not None and len(node.args) > position:
            values.append(node.args[position])
        if name == "RequestError" and not values:
            codes.add("invalid_request")  # RequestError's default code
        for value in values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                codes.add(value.value)
            elif isinstance(value, ast.Name) and value.id in constants:
                codes.add(constants[value.id])
    return codes


def source_codes() -> set[str]:
    """The string codes passed to ``RequestError``, ``rejected`` and ``ErrorOut`` in the code."""
    codes: set[str] = set()
    for path in [*(ROOT / "scheduler_core").rglob("*.py"), *(ROOT / "tasks").rglob("*.py")]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = {
            target.id: node.value.value
            for node in ast.walk(tree) if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for target in node.targets if isinstance(target, ast.Name)
        }
        codes |= _literal_codes(tree, constants)
    return codes


def documented_codes() -> set[str]:
    text = (ROOT / "docs" / "service.md").read_text(encoding="utf-8")
    table = text.split("| `error.code` | meaning | `error.field` |", 1)[1].split("\n\n", 1)[0]
    return {match for row in table.splitlines()[2:] for match in re.findall(r"^\| `(\w+)` \|", row)}


def test_every_error_code_is_documented() -> None:
    found = source_codes()
    # the scan itself must see the codes the audit named
    assert {"invalid_request", "invalid_backend_parameters", "invalid_gpu_id", "invalid_model_path",
            "invalid_diffusion_arguments", "dead_lettered"} <= found
    assert found == documented_codes()
