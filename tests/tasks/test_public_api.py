"""The curated public API of ``tasks`` (httpx-style pin: nothing missing, nothing leaking)."""

from __future__ import annotations
import __future__

import importlib
import pkgutil
import subprocess
import sys
from types import ModuleType

import tasks

#: The public surface; changing it is a deliberate act: update this list with it.
PUBLIC = [
    "DataLost",
    "Event",
    "Keys",
    "NotReplicated",
    "RedisOutOfMemory",
    "ReplayReport",
    "ServiceClient",
    "Settings",
    "Submission",
    "WaitTimeout",
    "ack",
    "claim_stale",
    "default_client",
    "ensure_group",
    "format_report",
    "get_settings",
    "read_group",
    "read_new",
    "redis_client",
    "replay",
    "submit",
]


def _import_every_module() -> None:
    for module in pkgutil.walk_packages(tasks.__path__, "tasks."):
        importlib.import_module(module.name)


def _public_names(module: ModuleType) -> set[str]:
    """Names a user sees on ``module``: not private, not one of its own submodules, not a compiler flag."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not (isinstance(value, ModuleType) and value.__name__.startswith(f"{module.__name__}."))
        and value is not __future__.annotations
    }


def test_public_names_are_pinned() -> None:
    assert tasks.__all__ == PUBLIC


def test_every_public_name_resolves_to_its_definition() -> None:
    for name in tasks.__all__:
        value = getattr(tasks, name)
        assert getattr(value, "__name__", name) == name
        assert value.__module__.startswith("tasks."), name


def test_nothing_public_leaks() -> None:
    """Only ``__all__`` is public, also once every module of the package has been imported."""
    _import_every_module()
    for name in tasks.__all__:
        getattr(tasks, name)
    assert _public_names(tasks) == set(PUBLIC)


def test_unknown_names_are_attribute_errors() -> None:
    try:
        tasks.pipeline  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as error:
        assert "pipeline" in str(error)
    else:
        raise AssertionError("tasks.pipeline resolved")


def test_importing_the_package_loads_neither_celery_nor_redis() -> None:
    """``gpusched schedule`` runs offline: the package's import loads no service dependency."""
    code = (
        "import sys, tasks, tasks.edges.cli; "
        "print(sorted(m for m in ('celery', 'redis', 'kombu') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
