"""Safetensors header reading: declared sizes from the header only, clear errors otherwise."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_core import _safetensors
from scheduler_core.model_folder import ModelFolderError, SafetensorsHeader, read_safetensors_header

TIB = 1 << 40


def write_safetensors(
    path: Path,
    extents: dict[str, tuple[int, int]],
    *,
    metadata: dict[str, str] | None = None,
    with_data: bool = True,
    padding: int = 0,
) -> int:
    """Write a real safetensors file; return its declared size (8 + header + data)."""
    header: dict[str, Any] = {
        name: {"dtype": "U8", "shape": [end - begin], "data_offsets": [begin, end]}
        for name, (begin, end) in extents.items()
    }
    if metadata is not None:
        header["__metadata__"] = metadata
    raw = json.dumps(header).encode() + b" " * padding
    data_bytes = max((end for _, end in extents.values()), default=0)
    body = b"\0" * data_bytes if with_data else b""
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + body)
    return 8 + len(raw) + data_bytes


def write_raw(path: Path, header: bytes, *, declared: int | None = None) -> Path:
    """Write a length prefix (``declared`` or the real length) followed by ``header``."""
    length = len(header) if declared is None else declared
    path.write_bytes(struct.pack("<Q", length) + header)
    return path


def test_reads_sizes_and_counts_tensors_skipping_metadata(tmp_path: Path) -> None:
    file = tmp_path / "model.safetensors"
    declared = write_safetensors(file, {"b.weight": (16, 48), "a.weight": (0, 16)}, metadata={"format": "pt"})

    header = read_safetensors_header(file)

    raw_length = struct.unpack("<Q", file.read_bytes()[:8])[0]
    assert header == SafetensorsHeader(
        path=str(file),
        header_bytes=raw_length,
        data_bytes=48,
        tensor_count=2,
        file_bytes=declared,
    )
    assert header.file_bytes == file.stat().st_size


def test_data_bytes_is_the_largest_end_offset_not_the_sum(tmp_path: Path) -> None:
    file = tmp_path / "shared.safetensors"
    write_safetensors(file, {"x": (0, 100), "y": (100, 100), "z": (40, 60)})

    assert read_safetensors_header(file).data_bytes == 100
    assert read_safetensors_header(file).tensor_count == 3


def test_empty_header_has_no_data(tmp_path: Path) -> None:
    file = tmp_path / "empty.safetensors"
    write_safetensors(file, {}, metadata={"format": "pt"})

    header = read_safetensors_header(file)

    assert (header.tensor_count, header.data_bytes) == (0, 0)
    assert header.file_bytes == 8 + header.header_bytes


def test_space_padded_header_is_accepted(tmp_path: Path) -> None:
    file = tmp_path / "padded.safetensors"
    declared = write_safetensors(file, {"w": (0, 8)}, padding=5)

    assert read_safetensors_header(file).file_bytes == declared


def test_missing_data_region_still_reports_declared_size(tmp_path: Path) -> None:
    """Policy: the data region is never read, so a short file keeps its declared size."""
    file = tmp_path / "partial.safetensors"
    declared = write_safetensors(file, {"w": (0, TIB)}, with_data=False)

    header = read_safetensors_header(file)

    assert header.data_bytes == TIB
    assert header.file_bytes == declared
    assert file.stat().st_size < 1024


def test_accepts_str_path(tmp_path: Path) -> None:
    file = tmp_path / "m.safetensors"
    write_safetensors(file, {"w": (0, 4)})

    assert read_safetensors_header(str(file)).path == str(file)


@pytest.mark.parametrize("content", [b"", b"\x10\x00\x00", b"1234567"])
def test_file_shorter_than_length_prefix_is_truncated(tmp_path: Path, content: bytes) -> None:
    file = tmp_path / "short.safetensors"
    file.write_bytes(content)

    with pytest.raises(ModelFolderError, match=r"short\.safetensors is truncated"):
        read_safetensors_header(file)


def test_header_longer_than_file_is_truncated(tmp_path: Path) -> None:
    file = write_raw(tmp_path / "cut.safetensors", b'{"w": {"data_', declared=4096)

    with pytest.raises(ModelFolderError, match=r"truncated: header declares 4096 bytes"):
        read_safetensors_header(file)


@pytest.mark.parametrize("declared", [2**64 - 1, 2**40, _safetensors.MAX_HEADER_BYTES + 1])
def test_huge_declared_header_length_is_rejected_without_reading(tmp_path: Path, declared: int) -> None:
    file = write_raw(tmp_path / "huge.safetensors", b"{}", declared=declared)

    with pytest.raises(ModelFolderError, match=r"exceeds the \d+-byte limit") as caught:
        read_safetensors_header(file)

    assert caught.value.field == "model.local_path"


def test_header_limit_is_inclusive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    header = b'{"w": {"data_offsets": [0, 1]}}'
    monkeypatch.setattr(_safetensors, "MAX_HEADER_BYTES", len(header))
    at_limit = write_raw(tmp_path / "ok.safetensors", header)
    over_limit = write_raw(tmp_path / "over.safetensors", header + b" ")

    assert read_safetensors_header(at_limit).tensor_count == 1
    with pytest.raises(ModelFolderError, match="limit"):
        read_safetensors_header(over_limit)


@pytest.mark.parametrize(
    "header",
    [
        b"\xff\xfe{}",
        b"{not json}",
        b"[1, 2]",
        b'"text"',
        b"[" * 100_000 + b"]" * 100_000,
    ],
    ids=["not-utf8", "invalid-json", "array", "string", "deeply-nested"],
)
def test_corrupt_header_is_rejected(tmp_path: Path, header: bytes) -> None:
    file = write_raw(tmp_path / "bad.safetensors", header)

    with pytest.raises(ModelFolderError, match=r"bad\.safetensors has a corrupt header"):
        read_safetensors_header(file)


@pytest.mark.parametrize(
    "entry",
    [
        {"dtype": "F16"},
        {"data_offsets": [0]},
        {"data_offsets": [0, 1, 2]},
        {"data_offsets": [-1, 4]},
        {"data_offsets": [8, 4]},
        {"data_offsets": [0, "4"]},
        {"data_offsets": [0, 4.0]},
        {"data_offsets": [False, True]},
        {"data_offsets": {"begin": 0, "end": 4}},
        [0, 4],
        "tensor",
    ],
)
def test_invalid_data_offsets_name_the_tensor(tmp_path: Path, entry: object) -> None:
    header = json.dumps({"__metadata__": {}, "layer.0": entry}).encode()
    file = write_raw(tmp_path / "bad.safetensors", header)

    with pytest.raises(ModelFolderError, match=r"tensor 'layer\.0' lacks a valid data_offsets"):
        read_safetensors_header(file)


def test_metadata_is_not_validated(tmp_path: Path) -> None:
    header = json.dumps({"__metadata__": [1, 2], "w": {"data_offsets": [0, 2]}}).encode()
    file = write_raw(tmp_path / "meta.safetensors", header)

    assert read_safetensors_header(file).tensor_count == 1


def test_missing_file_and_directory_are_unreadable(tmp_path: Path) -> None:
    with pytest.raises(ModelFolderError, match=r"cannot read .*absent\.safetensors"):
        read_safetensors_header(tmp_path / "absent.safetensors")
    with pytest.raises(ModelFolderError, match="cannot read"):
        read_safetensors_header(tmp_path)


def test_error_is_a_one_line_value_error_with_field(tmp_path: Path) -> None:
    file = write_raw(tmp_path / "bad.safetensors", b"{broken")

    with pytest.raises(ValueError, match=r"bad\.safetensors") as caught:
        read_safetensors_header(file)

    assert isinstance(caught.value, ModelFolderError)
    assert caught.value.field == "model.local_path"
    assert "\n" not in str(caught.value)
    assert caught.value.message == str(caught.value)


_extents = st.dictionaries(
    st.text(min_size=1, max_size=8).filter(lambda name: name != "__metadata__"),
    st.tuples(st.integers(0, 2**40), st.integers(0, 2**40)).map(lambda pair: tuple(sorted(pair))),
    max_size=6,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(extents=_extents)
def test_property_declared_size_matches_header(tmp_path: Path, extents: dict[str, tuple[int, int]]) -> None:
    file = tmp_path / "prop.safetensors"
    declared = write_safetensors(file, extents, with_data=False)

    header = read_safetensors_header(file)

    assert header.file_bytes == declared
    assert header.tensor_count == len(extents)
    assert header.data_bytes == max((end for _, end in extents.values()), default=0)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.binary(max_size=64))
def test_property_arbitrary_bytes_parse_or_raise_folder_error(tmp_path: Path, content: bytes) -> None:
    file = tmp_path / "fuzz.safetensors"
    file.write_bytes(content)

    try:
        header = read_safetensors_header(file)
    except ModelFolderError as exc:
        assert exc.field == "model.local_path"
    else:
        assert header.file_bytes == 8 + header.header_bytes + header.data_bytes


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    """Opening a FIFO for reading blocks until a writer appears; the reader must not wait."""
    import os
    import threading

    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []
    reader = threading.Thread(
        target=lambda: outcome.extend(_raised(lambda: read_safetensors_header(fifo))), daemon=True
    )
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "the reader blocked on the FIFO"
    assert len(outcome) == 1 and isinstance(outcome[0], ModelFolderError)
    assert str(outcome[0]) == f"cannot read {fifo}: not a regular file"


def _raised(call: Any) -> list[BaseException]:
    try:
        call()
    except BaseException as error:  # the test inspects whatever came out
        return [error]
    return []
