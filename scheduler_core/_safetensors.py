"""Safetensors headers: the size of a weight file without touching its tensors.

A safetensors file is ``u64 little-endian header length`` + ``JSON header`` +
``data region``. Every tensor entry in the header declares its byte range in
the data region (``data_offsets``), so the header alone tells us how many
bytes the weights occupy. This module reads the 8-byte prefix and the header,
never the data region.
"""

from __future__ import annotations

import json
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

#: Largest header we accept: 100 MiB. The upstream ``safetensors`` loader
#: rejects headers above 100,000,000 bytes, so nothing valid is lost.
MAX_HEADER_BYTES = 100 * 1024 * 1024

#: Length prefix of a safetensors file (safetensors format spec: u64, little endian).
_LENGTH_PREFIX = struct.Struct("<Q")

#: Header key that holds free-form string metadata, not a tensor (format spec).
_METADATA_KEY = "__metadata__"


class ModelFolderError(ValueError):
    """A local model folder or one of its files cannot be read or is corrupt.

    The message is one line and names the offending file.

    Attributes:
        field: always ``model.local_path``.
        message: the one-line explanation.
    """

    field = "model.local_path"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class SafetensorsHeader:
    """What the header of one safetensors file declares.

    Attributes:
        path: the file that was read.
        header_bytes: length of the JSON header (the u64 prefix).
        data_bytes: size of the data region, the largest ``data_offsets`` end.
        tensor_count: number of tensor entries (``__metadata__`` excluded).
        file_bytes: ``8 + header_bytes + data_bytes``, the declared file size.
    """

    path: str
    header_bytes: int
    data_bytes: int
    tensor_count: int
    file_bytes: int


def open_regular(path: str | Path) -> BinaryIO:
    """Open ``path`` for reading only if it is a regular file; never block on a FIFO.

    The file is opened non-blocking (opening a FIFO for reading would wait for a
    writer) and checked with ``fstat`` on the opened descriptor, so a file swapped
    for a FIFO or a device between a check and the open is refused as well.

    Raises:
        ModelFolderError: it cannot be opened or is not a regular file.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ModelFolderError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise ModelFolderError(f"cannot read {path}: not a regular file")
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_safetensors_header(path: str | Path) -> SafetensorsHeader:
    """Read the length prefix and JSON header of a safetensors file.

    Only the first ``8 + header_bytes`` bytes are read. The data region is
    never read or checked: a file whose data region is shorter than declared
    (an interrupted download, a sparse placeholder) still reports the declared
    size, because the declared size is what the loaded weights will occupy.
    Reading is idempotent and has no side effects.

    Args:
        path: the ``.safetensors`` file.

    Returns:
        The declared sizes and tensor count.

    Raises:
        ModelFolderError: the file cannot be opened, is shorter than its
            header, declares a header above ``MAX_HEADER_BYTES``, or the header
            is not a JSON object of tensor entries with valid ``data_offsets``.
    """
    name = str(path)
    try:
        with open_regular(path) as stream:
            header_bytes = _read_header_length(stream, name)
            raw = stream.read(header_bytes)
    except OSError as exc:
        raise ModelFolderError(f"cannot read {name}: {exc.strerror or exc}") from None
    if len(raw) < header_bytes:
        raise ModelFolderError(
            f"{name} is truncated: header declares {header_bytes} bytes, "
            f"file holds {len(raw)} after the length prefix"
        )
    header = _parse_header(raw, name)
    tensor_count, data_bytes = _tensor_extent(header, name)
    return SafetensorsHeader(
        path=name,
        header_bytes=header_bytes,
        data_bytes=data_bytes,
        tensor_count=tensor_count,
        file_bytes=_LENGTH_PREFIX.size + header_bytes + data_bytes,
    )


def _read_header_length(stream: BinaryIO, name: str) -> int:
    """Read and bound the u64 header length; the stream is left at the header start."""
    prefix = stream.read(_LENGTH_PREFIX.size)
    if len(prefix) < _LENGTH_PREFIX.size:
        raise ModelFolderError(
            f"{name} is truncated: {len(prefix)} bytes, shorter than the 8-byte length prefix"
        )
    (header_bytes,) = _LENGTH_PREFIX.unpack(prefix)
    if header_bytes > MAX_HEADER_BYTES:
        raise ModelFolderError(
            f"{name} is not a safetensors file: header length {header_bytes} exceeds "
            f"the {MAX_HEADER_BYTES}-byte limit"
        )
    return int(header_bytes)


def _parse_header(raw: bytes, name: str) -> dict[str, Any]:
    """Decode the header as a JSON object."""
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ModelFolderError(f"{name} has a corrupt header: not valid UTF-8 JSON") from None
    if not isinstance(header, dict):
        raise ModelFolderError(f"{name} has a corrupt header: not a JSON object")
    return header


def _tensor_extent(header: dict[str, Any], name: str) -> tuple[int, int]:
    """Count tensor entries and find the end of the data region they declare."""
    count = 0
    end = 0
    for key in sorted(header):
        if key == _METADATA_KEY:
            continue
        _begin, stop = _data_offsets(header[key], key, name)
        count += 1
        end = max(end, stop)
    return count, end


def _data_offsets(entry: object, key: str, name: str) -> tuple[int, int]:
    """Validate one tensor entry's ``data_offsets`` pair: two ints, 0 <= begin <= end."""
    offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
    if (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(_is_offset(value) for value in offsets)
        and offsets[0] <= offsets[1]
    ):
        return int(offsets[0]), int(offsets[1])
    raise ModelFolderError(f"{name} has a corrupt header: tensor {key!r} lacks a valid data_offsets pair")


def _is_offset(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
