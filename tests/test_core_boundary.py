"""The service reaches the placement core only through its public package.

``scheduler_core.__all__`` (pinned by ``tests/engine/test_public_api.py``) is the core's
surface; its modules (``framework``, ``memo``, ``strategies``, ``precise`` …) are the
implementation and may be reshaped without touching ``tasks/`` or the GPUStack plugin. Every
import counts: module level, in a function, and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The trees that use the core as a library.
CLIENTS = ("tasks", "integrations/gpustack-plugin/gpusched_gpustack_plugin")


def _core_imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``(line, module)`` for every import of ``scheduler_core`` or one of its modules."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        yield from ((node.lineno, name) for name in names if name.split(".")[0] == "scheduler_core")


def _reaching_inside() -> list[str]:
    found = []
    for client in CLIENTS:
        for path in sorted((ROOT / client).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            found += [
                f"{path.relative_to(ROOT)}:{line} imports {name}"
                for line, name in _core_imports(tree)
                if name != "scheduler_core"
            ]
    return found


def test_the_service_imports_only_the_cores_public_package() -> None:
    assert _reaching_inside() == []


def test_the_checker_sees_a_module_import() -> None:
    source = "def f():\n    from scheduler_core.memo import SnapshotMemo\nimport scheduler_core.precise\n"
    tree = ast.parse(source)
    assert sorted(_core_imports(tree)) == [(2, "scheduler_core.memo"), (3, "scheduler_core.precise")]
    assert list(_core_imports(ast.parse("from scheduler_core import schedule\n"))) == [(1, "scheduler_core")]
