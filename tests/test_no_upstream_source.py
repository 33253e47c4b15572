"""The tree carries no upstream code: GPUStack and SGLang are installed from PyPI at test time.

The oracles (``tools/gpustack-oracle``, ``tools/sglang-oracle``) and the GPUStack server the
bridge tests run install their upstream from the package index into virtualenvs of their own.
A tracked archive, wheel or copy of an upstream package would bring upstream source back into
the repository unnoticed, so each of those shapes fails here, naming the file.
"""

from __future__ import annotations

import subprocess
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Archive and package formats (source archives, wheels, eggs, zips): none belongs in the tree.
ARCHIVE_SUFFIXES = (
    ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst",
    ".zip", ".whl", ".egg", ".gz", ".bz2", ".xz", ".zst", ".7z", ".rar", ".jar",
)

#: Top-level import names of the upstreams the tests run; a folder of that name anywhere in the
#: tree is a copy of the package (GPUStack's server and selector, SGLang's runtime).
UPSTREAM_PACKAGES = frozenset({"gpustack", "sglang"})

#: Leading bytes of archive formats, so a renamed archive is caught too.
ARCHIVE_MAGIC = (b"\x1f\x8b", b"PK\x03\x04", b"BZh", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd", b"7z\xbc\xaf")


def tracked_files() -> list[str]:
    """Every path ``git ls-files`` lists (the test skips outside a git checkout, e.g. an sdist)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=30
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]


def archive_problem(path: str) -> str | None:
    """Why ``path`` is an archive, or None."""
    name = PurePosixPath(path).name.lower()
    if name.endswith(ARCHIVE_SUFFIXES):
        return f"{path}: an archive or package file ({name.rsplit('.', 1)[-1]})"
    try:
        with open(ROOT / path, "rb") as handle:
            head = handle.read(8)
    except OSError:
        return None
    if head.startswith(ARCHIVE_MAGIC):
        return f"{path}: archive bytes under another name"
    return None


def upstream_copy_problem(path: str) -> str | None:
    """Why ``path`` lies inside a copy of an upstream package, or None."""
    for part in PurePosixPath(path).parts[:-1]:
        if part.lower() in UPSTREAM_PACKAGES:
            return f"{path}: inside a folder named {part!r}, a copy of the upstream package"
    return None


def test_no_tracked_archive_or_wheel() -> None:
    problems = [p for p in map(archive_problem, tracked_files()) if p]
    assert problems == [], "\n".join(problems)


def test_no_tracked_copy_of_an_upstream_package() -> None:
    problems = [p for p in map(upstream_copy_problem, tracked_files()) if p]
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize(
    ("path", "flagged"),
    [
        ("tools/gpustack-oracle/gpustack-src.tar.gz", True),
        ("vendor/sglang-0.5.16-py3-none-any.whl", True),
        ("tools/x/gpustack/policies/utils.py", True),
        ("third_party/sglang/srt/server_args.py", True),
        ("tools/gpustack-oracle/oracle.py", False),
        ("tools/sglang-oracle/setup.sh", False),
        ("tasks/edges/gpustack_bridge.py", False),
        ("docs/gpustack.md", False),
    ],
)
def test_the_rules_flag_what_they_should(path: str, flagged: bool) -> None:
    name_flag = PurePosixPath(path).name.lower().endswith(ARCHIVE_SUFFIXES)
    assert (name_flag or upstream_copy_problem(path) is not None) is flagged
