"""The archive: trimmed events as JSON lines, written whole or not at all, read back in order."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.audit.archive import archive_files, read_archive, read_archived_snapshots, write_archive


def test_events_and_snapshots_round_trip_and_files_sort_by_id(tmp_path: Path) -> None:
    later = write_archive([("200-0", {"type": "b", "data": "{}"})], tmp_path)
    first = write_archive([("10-0", {"type": "a", "data": "{}"}), ("10-1", {"type": "a", "data": '{"x":1}'})],
                          tmp_path, snapshots={"d1": '{"workers":[]}'})
    assert write_archive([], tmp_path) is None
    other = write_archive([("5-0", {"type": "z"})], tmp_path, tag="c2")  # another partition
    assert first is not None and later is not None and other is not None
    assert first.name == "events-10-0-10-1.jsonl"
    assert archive_files(tmp_path) == [first, later]
    assert archive_files(tmp_path, "c2") == [other]
    assert [entry_id for entry_id, _ in read_archive([first, later])] == ["10-0", "10-1", "200-0"]
    assert list(read_archive([first]))[1][1] == {"type": "a", "data": '{"x":1}'}
    assert read_archived_snapshots([first, later]) == {"d1": '{"workers":[]}'}
    assert not list(tmp_path.glob(".events-*"))  # no temporary file left behind


def test_a_line_that_is_no_archived_event_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "events-1-0-1-0.jsonl"
    bad.write_text('{"id": "1-0", "fields": {}}\n{"id": 3}\n')
    with pytest.raises(ValueError, match=r"events-1-0-1-0.jsonl:2: not an archived event"):
        list(read_archive([bad]))
