"""The request id of a GPUStack instance: deterministic, and new for a re-created instance.

``gs<cluster>-mi<id>-<digest>``, where the digest is the first 10 hex digits of the SHA-256
of the instance's id and name. The same row always gives the same id, so a restarted bridge
re-submits the same request and gpusched answers ``duplicate``: nothing is placed twice.
ModelController re-creates a deleted replica as a new row (a new id and a new random name
suffix), which is a new request; even a database that reuses an id gives another digest.
(``created_at`` is left out: GPUStack formats it differently in a list and in a watch event.)
gpusched moves a placement as ``<id>~<n>`` (docs/service.md, *Rescheduling*):
:func:`base_request_id` maps it back to the instance.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

#: What :func:`request_id` produces (a subset of gpusched's request-id alphabet).
REQUEST_ID = re.compile(r"^gs(?P<cluster>[0-9]{1,19})-mi(?P<instance>[0-9]{1,19})-(?P<digest>[0-9a-f]{10})$")


def request_id(cluster_id: int, instance: dict[str, Any]) -> str:
    """The request id of ``instance`` (a validated row: integer ``id``, string ``name``)."""
    identity = f"{instance['id']}\n{instance['name']}"
    digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"gs{cluster_id}-mi{instance['id']}-{digest}"


def base_request_id(rid: str) -> str:
    """``rid`` without gpusched's move suffix (``<id>~<n>``)."""
    return rid.split("~", 1)[0]


def instance_of(rid: str, cluster_id: int) -> int | None:
    """The instance id a (possibly moved) request id of this cluster stands for, else None."""
    match = REQUEST_ID.match(base_request_id(rid))
    if match is None or int(match["cluster"]) != cluster_id:
        return None
    return int(match["instance"])
