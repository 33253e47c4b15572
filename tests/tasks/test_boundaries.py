"""The service's boundaries: the core's public API only, no private attribute of another object, no cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import tasks

PACKAGE = Path(tasks.__file__).resolve().parent


def _modules() -> dict[str, ast.Module]:
    parsed: dict[str, ast.Module] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        parsed[name] = ast.parse(path.read_text(encoding="utf-8"))
    return parsed


def _imported(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _imported_modules(tree: ast.Module) -> set[str]:
    """The modules ``import x`` and ``from x import y`` name (not the names imported from them)."""
    nodes = list(ast.walk(tree))
    names = {alias.name for node in nodes if isinstance(node, ast.Import) for alias in node.names}
    return names | {node.module for node in nodes if isinstance(node, ast.ImportFrom) and node.module}


def test_the_service_imports_only_the_cores_public_api() -> None:
    """``scheduler_core`` itself, never one of its modules (public or private)."""
    for name, tree in _modules().items():
        core = {module for module in _imported_modules(tree) if module.split(".")[0] == "scheduler_core"}
        assert core <= {"scheduler_core"}, f"{name} imports {sorted(core - {'scheduler_core'})}"


#: Public names that start with an underscore: ``os._exit`` is the standard library's documented
#: way for a forked child to end without running its parent's exit handlers (the replay's
#: processes, ``tasks/decision/replay.py``).
PUBLIC_UNDERSCORED = {("os", "_exit")}


def test_no_private_attribute_of_another_object_is_touched() -> None:
    """``x._y`` only for ``self``/``cls``: never Celery's, kombu's, redis-py's or another module's."""
    for name, tree in _modules().items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            if node.attr.startswith("_") and not node.attr.startswith("__"):
                owner = node.value.id if isinstance(node.value, ast.Name) else ""
                if (owner, node.attr) in PUBLIC_UNDERSCORED:
                    continue
                assert owner in ("self", "cls"), f"{name}:{node.lineno}: {owner or '...'}.{node.attr}"


def test_the_module_imports_have_no_cycle() -> None:
    modules = _modules()
    graph = {
        name: {
            target for target in _imported(tree)
            if target in modules and target != name and not name.startswith(f"{target}.")
        }
        for name, tree in modules.items()
    }
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, " -> ".join((*path, name))
        if name in done:
            return
        for target in graph[name]:
            visit(target, (*path, name))
        done.add(name)

    for name in graph:
        visit(name, ())
