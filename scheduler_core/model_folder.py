"""A local model folder read without loading tensors.

:func:`read_local_model` reads config.json, diffusers' model_index.json and
the weight size from ``model.safetensors.index.json``, safetensors headers or
file sizes (GPUStack's ``policies/utils.py: get_local_model_weight_size``).
Unreadable metadata raises :class:`ModelFolderError` naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from scheduler_core._safetensors import (
    MAX_HEADER_BYTES,
    ModelFolderError,
    SafetensorsHeader,
    open_regular,
    read_safetensors_header,
)

__all__ = [
    "SOURCE_DIFFUSERS",
    "SOURCE_FILE_SIZES",
    "SOURCE_HEADERS",
    "SOURCE_INDEX",
    "SOURCE_UNKNOWN",
    "LocalModelFacts",
    "ModelFolderError",
    "SafetensorsHeader",
    "read_local_model",
    "read_safetensors_header",
]

#: Sharded-checkpoint index written by ``transformers``' ``save_pretrained``.
_INDEX_FILE = "model.safetensors.index.json"

#: Mistral's single-file duplicate of the sharded weights (GPUStack ``utils/hub.py``
#: excludes it to avoid double counting).
_CONSOLIDATED_FILE = "consolidated.safetensors"

#: Pickle weight formats GPUStack also counts; read by on-disk size only.
_PICKLE_SUFFIXES = frozenset({".bin", ".pt", ".pth"})

#: model_index.json key that marks a diffusers pipeline.
_DIFFUSERS_MARKER = "_diffusers_version"

#: Largest JSON file we parse; real configs and indexes are a few MiB at most.
_MAX_JSON_BYTES = MAX_HEADER_BYTES

#: ``weight_source`` values.
SOURCE_INDEX = "safetensors_index"
SOURCE_HEADERS = "safetensors_headers"
SOURCE_FILE_SIZES = "file_sizes"
SOURCE_DIFFUSERS = "diffusers_components"
SOURCE_UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class LocalModelFacts:
    """What a local model folder says about itself, read without loading tensors.

    Attributes:
        path: the folder, as given.
        config: root config.json (read-only), None when absent.
        model_index: diffusers model_index.json (read-only; a list file is
            reduced to its first element), None when absent.
        is_diffusers: model_index.json is present and has ``_diffusers_version``.
        weight_bytes: total weight size in bytes; None when unknown.
        weight_source: how ``weight_bytes`` was found: ``safetensors_index``,
            ``safetensors_headers``, ``file_sizes``, ``diffusers_components``
            or ``unknown``.
    """

    path: str
    config: Mapping[str, Any] | None = field(hash=False)
    model_index: Mapping[str, Any] | None = field(hash=False)
    is_diffusers: bool
    weight_bytes: int | None
    weight_source: str


@dataclass(frozen=True, slots=True)
class _Weights:
    size: int | None
    source: str


_UNKNOWN_WEIGHTS = _Weights(None, SOURCE_UNKNOWN)


def read_local_model(path: str | Path) -> LocalModelFacts:
    """Read config.json, model_index.json and the weight size of a model folder.

    Weight size, for a plain folder (and for each diffusers component):

    1. ``model.safetensors.index.json`` with an integer ``metadata.total_size``;
    2. else the declared sizes (:func:`read_safetensors_header`) of every
       ``*.safetensors`` file at the top level, sorted by name, without
       ``consolidated.safetensors`` -- unless that is the only one, as in
       Mistral-format-only folders;
    3. else the on-disk size of ``.bin``/``.pt``/``.pth`` files. Pickle files
       are never opened (headers-only policy) and never added to safetensors,
       so a folder with both formats is counted once;
    4. else unknown (None).

    A diffusers folder sums rule 1-3 over every component: a key of
    model_index.json not starting with ``_`` whose value is a
    ``["library", "Class"]`` list and whose sub-folder exists. Weights are
    unknown when no component has any.

    Only file metadata, JSON files and safetensors headers are read; the
    result is deterministic (sorted iteration) and the folder is not modified.

    Args:
        path: the model folder.

    Returns:
        The folder facts.

    Raises:
        ModelFolderError: the folder is missing or not a directory, or
            config.json, model_index.json, an index file or a safetensors
            header cannot be read or is invalid.
    """
    folder = Path(path)
    if not folder.is_dir():
        problem = "is not a directory" if folder.exists() else "does not exist"
        raise ModelFolderError(f"model folder {folder} {problem}")
    config = _read_config(folder / "config.json")
    model_index = _read_model_index(folder / "model_index.json")
    is_diffusers = model_index is not None and _DIFFUSERS_MARKER in model_index
    if model_index is not None and is_diffusers:
        weights = _diffusers_weights(folder, model_index)
    else:
        weights = _folder_weights(folder)
    return LocalModelFacts(
        path=str(folder),
        config=config,
        model_index=model_index,
        is_diffusers=is_diffusers,
        weight_bytes=weights.size,
        weight_source=weights.source,
    )


def _read_json(file: Path) -> object:
    """Parse a JSON file (bounded by ``_MAX_JSON_BYTES``)."""
    try:
        with open_regular(file) as stream:
            raw = stream.read(_MAX_JSON_BYTES + 1)
    except OSError as exc:
        raise ModelFolderError(f"cannot read {file}: {exc.strerror or exc}") from None
    if len(raw) > _MAX_JSON_BYTES:
        raise ModelFolderError(f"{file} is larger than {_MAX_JSON_BYTES} bytes")
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ModelFolderError(
            f"{file} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ModelFolderError(f"{file} is not valid JSON text") from None


def _is_present(file: Path) -> bool:
    """Whether ``file`` exists; only a regular file may.

    Raises:
        ModelFolderError: it exists but is not a regular file (a directory, or a
            FIFO that would block the read).
    """
    if not file.exists():
        return False
    if not file.is_file():
        raise ModelFolderError(f"{file} is not a regular file")
    return True


def _read_object(file: Path) -> dict[str, Any] | None:
    """A JSON-object file, or None when the file does not exist."""
    if not _is_present(file):
        return None
    document = _read_json(file)
    if not isinstance(document, dict):
        raise ModelFolderError(f"{file} is not a JSON object")
    return document


def _read_config(file: Path) -> Mapping[str, Any] | None:
    document = _read_object(file)
    return None if document is None else MappingProxyType(document)


def _read_model_index(file: Path) -> Mapping[str, Any] | None:
    """model_index.json; a list document stands for its first element (GPUStack rule)."""
    if not _is_present(file):
        return None
    document = _read_json(file)
    if isinstance(document, list):
        if not document:
            raise ModelFolderError(f"{file} is an empty list")
        document = document[0]
    if not isinstance(document, dict):
        raise ModelFolderError(f"{file} is not a JSON object or a list of objects")
    return MappingProxyType(document)


def _folder_weights(folder: Path) -> _Weights:
    """Weight size of one folder's top level (rules 1-4 of :func:`read_local_model`)."""
    total_size = _index_total_size(folder / _INDEX_FILE)
    if total_size is not None:
        return _Weights(total_size, SOURCE_INDEX)
    files = _top_level_files(folder)
    shards = _safetensors_shards(files)
    if shards:
        return _Weights(sum(read_safetensors_header(f).file_bytes for f in shards), SOURCE_HEADERS)
    pickles = [f for f in files if f.suffix in _PICKLE_SUFFIXES]
    if pickles:
        return _Weights(sum(_file_size(f) for f in pickles), SOURCE_FILE_SIZES)
    return _UNKNOWN_WEIGHTS


def _index_total_size(file: Path) -> int | None:
    """``metadata.total_size`` of an index file; None when absent or not an integer."""
    index = _read_object(file)
    metadata = None if index is None else index.get("metadata")
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    if isinstance(total, int) and not isinstance(total, bool) and total >= 0:
        return total
    return None


def _top_level_files(folder: Path) -> list[Path]:
    """Regular files (symlinks followed) directly in ``folder``, sorted by name."""
    try:
        entries = sorted(folder.iterdir(), key=lambda entry: entry.name)
    except OSError as exc:
        raise ModelFolderError(f"cannot list {folder}: {exc.strerror or exc}") from None
    return [entry for entry in entries if entry.is_file()]


def _safetensors_shards(files: list[Path]) -> list[Path]:
    """The safetensors files to count; consolidated.safetensors only when alone."""
    shards = [f for f in files if f.suffix == ".safetensors"]
    without_consolidated = [f for f in shards if f.name != _CONSOLIDATED_FILE]
    return without_consolidated or shards


def _file_size(file: Path) -> int:
    try:
        return file.stat().st_size
    except OSError as exc:
        raise ModelFolderError(f"cannot stat {file}: {exc.strerror or exc}") from None


def _diffusers_weights(folder: Path, model_index: Mapping[str, Any]) -> _Weights:
    """Sum of the component folders' weights.

    The component rule of GPUStack ``scheduler/calculator.py: calculate_diffusion_model_weight_size``.
    """
    sizes: list[int] = []
    for key in sorted(model_index):
        component = folder / key
        if _is_component(key, model_index[key]) and component.is_dir():
            size = _folder_weights(component).size
            if size is not None:
                sizes.append(size)
    return _Weights(sum(sizes), SOURCE_DIFFUSERS) if sizes else _UNKNOWN_WEIGHTS


def _is_component(key: str, value: object) -> bool:
    """A diffusers component entry: ``"name": ["library", "Class"]`` with a plain name."""
    is_plain_name = key not in {"", ".", ".."} and "/" not in key and "\\" not in key
    return is_plain_name and not key.startswith("_") and isinstance(value, list | tuple)
