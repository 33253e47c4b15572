"""The audit archive: the trimmed part of the event log as JSON lines, and reading it back.

Before the retention trims ``gpusched:events`` (:mod:`tasks.audit.retention`)
it writes the events it removes into the archive folder, one file per trim,
``events-[<partition>-]<first id>-<last id>.jsonl``: one line per event,
``{"id": "<stream id>", "fields": {...}}`` with the entry's fields exactly as
they were stored (the envelope, ``data`` still a JSON string), then one line
per stored snapshot the trim deletes, ``{"snapshot": "<sha256>", "document":
"<JSON>"}`` (a ``sched.cluster.applied`` event references its snapshot by
digest). A file is written under a temporary name and renamed, so it is
complete or absent.

``gpusched replay --archive FOLDER`` reads the folder's files in id order
before the live log and replays the whole history from version 0.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import redis

from tasks.base.events import dumps
from tasks.state.streams import read_range, stream_id_key

#: Events read per round trip.
PAGE = 1000

Entry = tuple[str, dict[str, str]]


def entries_before(client: redis.Redis, stream: str, before: str) -> Iterator[Entry]:
    """The stream's entries with an id below ``before``, in order."""
    cursor = "-"
    limit = stream_id_key(before)
    while True:
        entries = read_range(client, stream, cursor, PAGE)
        for entry_id, fields in entries:
            if stream_id_key(entry_id) >= limit:
                return
            yield entry_id, fields
        if len(entries) < PAGE:
            return
        cursor = f"({entries[-1][0]}"


def write_archive(
    entries: Iterable[Entry], folder: Path, tag: str = "", snapshots: Mapping[str, str] | None = None
) -> Path | None:
    """Write ``entries`` (and ``snapshots``: digest → document) as one archive file in
    ``folder``; None when there were no entries.

    Args:
        tag: put before the ids in the file name (the partition id).
    """
    folder.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".events-", suffix=".part")
    first = last = ""
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        for entry_id, fields in entries:
            first = first or entry_id
            last = entry_id
            out.write(dumps({"id": entry_id, "fields": fields}) + "\n")
        for digest in sorted(snapshots or {}):
            out.write(dumps({"snapshot": digest, "document": (snapshots or {})[digest]}) + "\n")
    if not first:
        os.unlink(temporary)
        return None
    prefix = f"{tag}-" if tag else ""
    target = folder / f"events-{prefix}{first}-{last}.jsonl"
    os.replace(temporary, target)
    return target


def archive_files(folder: Path, tag: str = "") -> list[Path]:
    """The archive files of one partition in ``folder``, oldest first."""
    prefix = f"events-{tag}-" if tag else "events-"
    found = []
    for path in folder.glob(f"{prefix}*.jsonl"):
        ids = path.name[len(prefix) : -len(".jsonl")].split("-")
        if len(ids) == 4 and all(part.isdigit() for part in ids):
            found.append(((int(ids[0]), int(ids[1])), path))
    return [path for _, path in sorted(found)]


def read_archive(paths: Iterable[Path]) -> Iterator[Entry]:
    """The entries of archive files, file after file.

    Raises:
        ValueError: a line that is not an archived event (names the file and line).
    """
    for _path, item in _items(paths):
        if "snapshot" not in item:
            yield str(item["id"]), {str(k): str(v) for k, v in item["fields"].items()}


def read_archived_snapshots(paths: Iterable[Path]) -> dict[str, str]:
    """The snapshot documents archived in the files, by digest.

    Raises:
        ValueError: a line that is not an archived event or snapshot.
    """
    return {str(item["snapshot"]): str(item["document"]) for _, item in _items(paths) if "snapshot" in item}


def _items(paths: Iterable[Path]) -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in paths:
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                try:
                    item = json.loads(line)
                    valid = isinstance(item, dict) and (
                        (isinstance(item.get("snapshot"), str) and isinstance(item.get("document"), str))
                        or (isinstance(item.get("id"), str) and isinstance(item.get("fields"), dict))
                    )
                except ValueError:
                    valid = False
                if not valid:
                    raise ValueError(f"{path}:{number}: not an archived event or snapshot")
                yield path, item
