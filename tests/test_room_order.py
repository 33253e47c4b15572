"""The service's rooms are floors: every import of ``tasks`` goes to the same room or a lower one.

The floors, lowest first (``docs/architecture.md``, "The service's rooms"):
``base`` (the leaves) < ``intake`` (pure checks of what arrives) < ``state``
(the Redis objects and the ``Runtime`` that wires them) < ``audit`` (the
event log's archive and checkpoints) < ``flows`` (the workflows that take a
``Runtime`` and send decisions) < ``decision`` (the decision pipeline and its
replay) < ``runtime`` (Celery and the worker node) < ``edges`` (CLI, client,
console, bridges; with them the top-level modules of ``tasks``). Every import
counts: module level, in a function, and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import tasks

PACKAGE = Path(tasks.__file__).resolve().parent

#: The rooms, lowest first.
FLOORS = ("base", "intake", "state", "audit", "flows", "decision", "runtime", "edges")

#: Imports allowed to go up, ``(importing module, imported module)``, each with its reason.
#: At most one; today there is none.
EXCEPTIONS: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room_of(module: str) -> str:
    """The room of a module of ``tasks``: its first subpackage, or ``edges`` for the top-level modules."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in FLOORS else "edges"


def _targets(tree: ast.Module, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """``(line, imported module)`` for every import of ``tasks`` anywhere in the tree."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield node.lineno, _absolute(node, module, is_package)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
    return ".".join([*base, node.module] if node.module else base)


def _imports() -> Iterator[tuple[str, int, str]]:
    """``(importing module, line, imported module)`` for every import of ``tasks`` inside ``tasks``."""
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for line, target in _targets(tree, module, path.name == "__init__.py"):
            if target == "tasks" or target.startswith("tasks."):
                yield module, line, target


def _upward() -> list[str]:
    return [
        f"{module}:{line} ({room_of(module)}) imports {target} ({room_of(target)})"
        for module, line, target in _imports()
        if FLOORS.index(room_of(target)) > FLOORS.index(room_of(module))
        and (module, target) not in EXCEPTIONS
    ]


def test_every_room_is_a_package_of_tasks() -> None:
    rooms = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
    assert rooms == set(FLOORS)


def test_every_import_goes_to_the_same_room_or_a_lower_one() -> None:
    assert _upward() == []


def test_no_room_pair_imports_both_ways() -> None:
    pairs = {(room_of(module), room_of(target)) for module, _, target in _imports()}
    both = sorted((a, b) for a, b in pairs if a < b and (b, a) in pairs)
    assert both == []


def test_at_most_one_documented_exception() -> None:
    assert len(EXCEPTIONS) <= 1
    assert all(reason.strip() for reason in EXCEPTIONS.values())


def test_the_checker_sees_an_upward_import() -> None:
    """The rule itself: a state module importing a flow is reported (a function-level import too)."""
    tree = ast.parse("def f():\n    from tasks.flows.followups import x\n")
    found = [target for _, target in _targets(tree, "tasks.state.records", False)]
    assert found == ["tasks.flows.followups"]
    assert FLOORS.index(room_of(found[0])) > FLOORS.index(room_of("tasks.state.records"))
    assert room_of("tasks.testing") == "edges" and room_of("tasks.runtime.middleware.base") == "runtime"
