"""How the cluster's rows are stored: canonical row JSON, instance keys and metadata.

Worker and instance rows are stored as the service understood them (pydantic
validated, ``None`` fields dropped, keys sorted), so the live hashes, the
stored snapshots and every replay fold parse to identical objects. Each
instance has a key (:func:`snapshot_instance_key`, :func:`booked_instance_key`)
and an :class:`InstanceMeta` that says who booked it and where it runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from scheduler_core import ModelInstance, Worker, canonical_json

Source = Literal["snapshot", "gpusched"]


@dataclass(frozen=True, slots=True)
class InstanceMeta:
    """What the service knows about an instance beyond its row.

    Attributes:
        source: ``snapshot`` (from the control plane) or ``gpusched`` (booked by us).
        order: (version, position) at which it entered the cluster.
        request_id: the request that booked it (``gpusched`` instances).
        pinned: booked from a manual GPU selection; never moved to other GPUs.
        workers: worker ids it occupies (main first).
    """

    source: Source
    order: tuple[int, int]
    request_id: str | None = None
    pinned: bool = False
    workers: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON shape stored in Redis and in events (small ints only: safe for Lua cjson)."""
        return {
            "src": self.source,
            "v": self.order[0],
            "i": self.order[1],
            "rid": self.request_id,
            "pin": self.pinned,
            "w": list(self.workers),
        }

    def to_dict_without_order(self) -> dict[str, Any]:
        """:meth:`to_dict` without ``v``/``i``: the script that stores it assigns the order."""
        data = self.to_dict()
        del data["v"], data["i"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InstanceMeta:
        """Inverse of :meth:`to_dict`."""
        return cls(
            source=data["src"],
            order=(int(data["v"]), int(data["i"])),
            request_id=data.get("rid"),
            pinned=bool(data.get("pin")),
            workers=tuple(int(w) for w in data.get("w") or ()),
        )


@dataclass(frozen=True, slots=True)
class Released:
    """An instance released by a script, with its meta (who booked it, pinned, workers)."""

    key: str
    meta: InstanceMeta


def snapshot_instance_key(instance: ModelInstance, position: int) -> str:
    """Key of a control-plane instance row: its id, else its name, else its position.

    Read from the row as validated, which is what the stored snapshot, every mirror
    and every replay read too: an id sent as ``7.0`` or ``"7"`` is instance 7
    (``id:7``, the key an ``instance_deleted`` naming ``instance_id`` 7 frees).
    """
    if instance.id is not None:
        return f"id:{instance.id}"
    if instance.name:
        return f"name:{instance.name}"
    return f"pos:{position}"


def booked_instance_key(request_id: str) -> str:
    """Key of an instance booked for ``request_id``."""
    return f"req:{request_id}"


def row_dict(row: Worker | ModelInstance) -> dict[str, Any]:
    """A validated row as JSON data (``None`` fields dropped: they are the defaults)."""
    return row.model_dump(mode="json", exclude_none=True)


def row_json(row: Worker | ModelInstance) -> str:
    """Canonical JSON of a validated row."""
    return canonical_json(row_dict(row))


def json_list(value: Any) -> list[Any]:
    """A JSON array written by Lua (whose cjson encodes an empty table as ``{}``)."""
    return [] if isinstance(value, dict) or value is None else list(value)


def parse_meta(raw: str) -> InstanceMeta:
    """An instance meta as stored in ``gpusched:cluster:instance_meta``."""
    data = json.loads(raw)
    data["w"] = json_list(data.get("w"))
    return InstanceMeta.from_dict(data)


def released_items(items: Any) -> tuple[Released, ...]:
    """Parse ``[{key, meta}]`` as written by the release scripts."""
    return tuple(
        Released(item["key"], InstanceMeta.from_dict({**item["meta"], "w": json_list(item["meta"].get("w"))}))
        for item in json_list(items)
    )
